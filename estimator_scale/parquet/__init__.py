"""Parquet in: `estimator-scale-parquet` converts Parquet to TFRecords.
Importing it loads neither pyarrow nor TensorFlow."""
from estimator_scale.parquet.spec import feature_spec

__all__ = ["feature_spec"]

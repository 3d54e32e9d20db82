"""Parquet in: `estimator-scale-parquet` converts Parquet to TFRecords.

Importing it loads neither pyarrow nor TensorFlow
(docs/design.md#parquet).
"""
from estimator_scale.parquet.spec import feature_spec

__all__ = ["feature_spec"]

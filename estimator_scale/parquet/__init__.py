"""Parquet in: `estimator-scale-parquet` converts Parquet to TFRecords.

Training reads TFRecords of tf.train.Example (`es.inputs.from_tfrecords`),
whose position the framework keeps across restarts; Parquet is converted
once, ahead of training, rather than read while training. `feature_spec`
turns the spec the converter writes into what `from_tfrecords` takes.

Importing this package loads neither pyarrow nor TensorFlow: only the
converter needs pyarrow (convert.py), only `feature_spec` TensorFlow.
"""
from estimator_scale.parquet.spec import feature_spec

__all__ = ["feature_spec"]

"""tf.train.Examples as a serving client sends them, encoded by the library."""
import numpy as np
import tensorflow as tf

import estimator_scale as es


def serialized_examples(features, directory):
  """Each row of {name: array} as a serialized tf.train.Example.

  The rows go through `es.inputs.write_tfrecord_shards`, the encoder the
  library writes training data with, so a serving test feeds what training
  reads. Its label column (all 0) is one more feature, which parsing with
  the serving signature's own spec ignores.
  """
  count = len(next(iter(features.values())))
  (path,) = es.inputs.write_tfrecord_shards(
      features, np.zeros(count, np.int64), str(directory), 1,
      label_key="__label__")
  return [record.numpy() for record in tf.data.TFRecordDataset(path)]

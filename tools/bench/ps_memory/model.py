"""One hashed table and a logistic layer: the model whose memory is measured.

The table is nearly all of the model's bytes, so a ps task's share of the
variables is a share of the table and its slots, and whatever else a task
holds at its peak (an initial value beside its variable, slots built as
constants) shows in its peak memory. It reads the click logs' C26, the
column with the most distinct ids, hashed into `rows` buckets.
"""
import tensorflow as tf

import estimator_scale as es
from model_zoo import wide_deep


@es.register
class OneTable(wide_deep.WideDeep):
  """One `rows` x `dim` hashed embedding of C26 and a logistic layer."""

  name = "one_table"

  def default_hparams(self):
    """See base class."""
    return dict(wide_deep.DEFAULT_HPARAMS, rows=1 << 22, dim=32)

  def logits(self, features, training, params):
    """See base class: the embedded id's logistic regression."""
    column = tf.feature_column.embedding_column(
        tf.feature_column.categorical_column_with_hash_bucket(
            "C26", params["rows"], dtype=tf.int64), params["dim"])
    net = tf.keras.layers.DenseFeatures([column], name="table")(features)
    return tf.reshape(tf.keras.layers.Dense(1, name="logit")(net), [-1])

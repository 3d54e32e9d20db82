"""The bench's embedding model: one large table, looked up sparsely.

A million rows of 32 floats (as much again for the momentum slot) behind a
linear layer, fed ids drawn log-uniformly over the rows (a few popular, most
rare, as ids in click logs are). Row 8 compares the peak memory of
accumulation k=4 with k=1 at the same micro-batch while training: whatever
accumulation keeps beyond one micro-batch shows, and a buffer the size of
the table would add the table's size again.
"""
import tensorflow as tf

import estimator_scale as es

ROWS, WIDTH, LOOKUPS = 1_000_000, 32, 8


@es.register
class BenchSparseEmbedding(es.ClassifierModel):
  """Mean of LOOKUPS embedding rows per example, then 2 logits."""

  name = "bench_sparse_embedding"

  def logits(self, features, training, params):
    table = tf.compat.v1.get_variable(
        "table", [ROWS, WIDTH],
        initializer=tf.compat.v1.random_normal_initializer(stddev=0.01,
                                                           seed=1))
    net = tf.reduce_mean(tf.nn.embedding_lookup(table, features["ids"]), 1)
    return tf.keras.layers.Dense(2, name="out")(net)

  def serving_features(self):
    return {"ids": tf.TensorSpec([LOOKUPS], tf.int64)}

  def input_fn(self, mode, global_batch_size, params, topology=None,
               accumulation_steps=1):
    """See base class: generated ids, labels from the most popular rows."""
    del mode, params, topology, accumulation_steps

    def input_fn(params=None, input_context=None):
      del params, input_context

      def batch(seed):
        uniform = tf.random.stateless_uniform(
            [global_batch_size, LOOKUPS], [seed, 0], maxval=tf.math.log(
                float(ROWS)))
        ids = tf.minimum(tf.cast(tf.exp(uniform), tf.int64) - 1, ROWS - 1)
        labels = tf.cast(ids[:, 0] < 100, tf.int64)
        return {"ids": ids}, labels

      return tf.data.Dataset.range(10**9).map(batch).prefetch(1)
    return input_fn

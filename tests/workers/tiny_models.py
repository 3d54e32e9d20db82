"""Tiny models whose gradients are known in closed form or are cheap to compare.

Each records the example ids it trains on in the `example_ids` collection so
multi-process tests can check sharding.
"""
import numpy as np
import tensorflow as tf

import estimator_scale as es


def _record(features, training):
  if training:
    tf.compat.v1.add_to_collection("example_ids", features["id"])


class SumLinear(es.BaseModel):
  """A linear layer whose loss is the sum of its outputs (AdaScale goldens)."""

  name = None

  def __init__(self, in_dim, bias):
    self.in_dim, self.bias = in_dim, bias

  def logits(self, features, training, params):
    _record(features, training)
    net = tf.compat.v1.layers.dense(
        features["x"], 2, use_bias=self.bias, name="linear",
        kernel_initializer=tf.compat.v1.constant_initializer(0.5))
    return net

  def loss(self, labels, logits, params):
    return tf.reduce_mean(tf.reduce_sum(logits, axis=1))

  def serving_features(self):
    return {"x": tf.TensorSpec([self.in_dim], tf.float32)}


class TinyMLP(es.ClassifierModel):
  """A small MLP with fixed initial weights (identical in every backend)."""

  def logits(self, features, training, params):
    _record(features, training)
    init = tf.compat.v1.glorot_uniform_initializer(seed=1)
    net = tf.compat.v1.layers.dense(features["x"], 16, tf.nn.tanh,
                                    kernel_initializer=init, name="hidden")
    return tf.compat.v1.layers.dense(net, 3, kernel_initializer=init,
                                     name="out")

  def serving_features(self):
    return {"x": tf.TensorSpec([5], tf.float32)}


class TinyEmbedding(es.ClassifierModel):
  """Embedding lookup (sparse IndexedSlices gradients) then a dense layer."""

  def logits(self, features, training, params):
    _record(features, training)
    table = tf.compat.v1.get_variable(
        "table", [20, 4],
        initializer=tf.compat.v1.random_normal_initializer(seed=2))
    net = tf.reduce_mean(tf.nn.embedding_lookup(table, features["tokens"]), 1)
    return tf.compat.v1.layers.dense(
        net, 3, name="out",
        kernel_initializer=tf.compat.v1.glorot_uniform_initializer(seed=1))

  def serving_features(self):
    return {"tokens": tf.TensorSpec([3], tf.int64)}


def generated_data(case, count, seed=0):
  """(model, features, labels) of a generated data set for `case`."""
  rng = np.random.RandomState(seed)
  labels = rng.randint(0, 3, count).astype(np.int64)
  if case == "embedding":
    return TinyEmbedding(), {"tokens": rng.randint(0, 20, (count, 3)).astype(
        np.int64), "id": np.arange(count)}, labels
  return TinyMLP(), {"x": rng.standard_normal((count, 5)).astype(np.float32),
                     "id": np.arange(count)}, labels

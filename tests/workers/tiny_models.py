"""Tiny models whose gradients are known in closed form or are cheap to compare.

Each records the example ids it trains on in the `example_ids` collection so
multi-process tests can check sharding. One network is written in each style
users write (v1 layers, get_variable, Keras layers in `logits`, a subclassed
tf.keras.Model) and one model has no labels.
"""
import numpy as np
import tensorflow as tf

import estimator_scale as es
from tests.workers import feature_models


class _Recorded:
  """Records the ids of the replica's whole batch (before any micro-batch split)."""

  def training_hooks(self, features, labels):
    tf.compat.v1.add_to_collection("example_ids", features["id"])
    return []


def _glorot():
  return tf.keras.initializers.GlorotUniform(seed=1)


class SumLinear(_Recorded, es.BaseModel):
  """A linear layer whose loss is the sum of its outputs (AdaScale goldens)."""

  name = None

  def __init__(self, in_dim, bias):
    self.in_dim, self.bias = in_dim, bias

  def logits(self, features, training, params):
    net = tf.compat.v1.layers.dense(
        features["x"], 2, use_bias=self.bias, name="linear",
        kernel_initializer=tf.compat.v1.constant_initializer(0.5))
    return net

  def loss(self, labels, logits, params):
    return tf.reduce_mean(tf.reduce_sum(logits, axis=1))

  def serving_features(self):
    return {"x": tf.TensorSpec([self.in_dim], tf.float32)}


class TinyMLP(_Recorded, es.ClassifierModel):
  """A small MLP in v1 layers with fixed initial weights."""

  def logits(self, features, training, params):
    init = tf.compat.v1.glorot_uniform_initializer(seed=1)
    net = tf.compat.v1.layers.dense(features["x"], 16, tf.nn.tanh,
                                    kernel_initializer=init, name="hidden")
    return tf.compat.v1.layers.dense(net, 3, kernel_initializer=init,
                                     name="out")

  def serving_features(self):
    return {"x": tf.TensorSpec([5], tf.float32)}


class TinyEmbedding(_Recorded, es.ClassifierModel):
  """Embedding lookup (sparse IndexedSlices gradients) then a dense layer."""

  def logits(self, features, training, params):
    table = tf.compat.v1.get_variable(
        "table", [20, 4],
        initializer=tf.compat.v1.random_normal_initializer(seed=2))
    net = tf.reduce_mean(tf.nn.embedding_lookup(table, features["tokens"]), 1)
    return tf.compat.v1.layers.dense(
        net, 3, name="out",
        kernel_initializer=tf.compat.v1.glorot_uniform_initializer(seed=1))

  def serving_features(self):
    return {"tokens": tf.TensorSpec([3], tf.int64)}


class KerasMLP(_Recorded, es.ClassifierModel):
  """The MLP as TensorFlow's guides write it: Keras layers made in `logits`."""

  def logits(self, features, training, params):
    net = tf.keras.layers.Dense(16, activation="tanh", name="hidden",
                                kernel_initializer=_glorot())(features["x"])
    return tf.keras.layers.Dense(3, name="out",
                                 kernel_initializer=_glorot())(net)

  def serving_features(self):
    return {"x": tf.TensorSpec([5], tf.float32)}


class _TwoLayers(tf.keras.Model):
  """A subclassed tf.keras.Model with a dropout-free forward pass."""

  def __init__(self):
    super().__init__(name="two_layers")
    self.hidden = tf.keras.layers.Dense(16, activation="tanh", name="hidden",
                                        kernel_initializer=_glorot())
    self.out = tf.keras.layers.Dense(3, name="out",
                                     kernel_initializer=_glorot())

  def call(self, inputs, training=False):
    return self.out(self.hidden(inputs))


class KerasSubclassed(_Recorded, es.ClassifierModel):
  """The MLP as a subclassed tf.keras.Model, through the `keras_model` hook."""

  def keras_model(self, params):
    return _TwoLayers()

  def keras_inputs(self, features):
    return features["x"]

  def serving_features(self):
    return {"x": tf.TensorSpec([5], tf.float32)}


class TinyAutoencoder(_Recorded, es.BaseModel):
  """A label-free model: reconstructs its input through a 2-unit code."""

  def logits(self, features, training, params):
    code = tf.keras.layers.Dense(2, activation="tanh", name="encoder",
                                 kernel_initializer=_glorot())(features["x"])
    return tf.keras.layers.Dense(5, name="decoder",
                                 kernel_initializer=_glorot())(code)

  def targets(self, features, labels):
    assert labels is None
    return features["x"]

  def loss(self, labels, logits, params):
    return tf.reduce_mean(tf.square(logits - labels))

  def eval_metrics(self, labels, logits, params):
    return {"mean_squared_error": tf.compat.v1.metrics.mean_squared_error(
        labels, logits)}

  def serving_features(self):
    return {"x": tf.TensorSpec([5], tf.float32)}


_DENSE_CASES = {"mlp": TinyMLP, "keras": KerasMLP,
                "keras_model": KerasSubclassed, "autoencoder": TinyAutoencoder}
CASES = tuple(_DENSE_CASES) + ("embedding",)


def generated_data(case, count, seed=0):
  """(model, features, labels) for `case`: one of CASES or feature_models.CASES."""
  if case in feature_models.CASES:
    return feature_models.generated_data(case, count, seed)
  rng = np.random.RandomState(seed)
  labels = rng.randint(0, 3, count).astype(np.int64)
  if case == "embedding":
    return TinyEmbedding(), {"tokens": rng.randint(0, 20, (count, 3)).astype(
        np.int64), "id": np.arange(count)}, labels
  if case not in _DENSE_CASES:
    raise ValueError(f"unknown case {case!r}; valid: {', '.join(CASES)}")
  features = {"x": rng.standard_normal((count, 5)).astype(np.float32),
              "id": np.arange(count)}
  model = _DENSE_CASES[case]()
  return model, features, None if case == "autoencoder" else labels

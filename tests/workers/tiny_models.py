"""Tiny models whose gradients are known in closed form or are cheap to compare.

Each records the example ids it trains on in the `example_ids` collection so
multi-process tests can check sharding. One network is written in each style
users write (v1 layers, get_variable, Keras layers in `logits`, a subclassed
tf.keras.Model) and one model has no labels.
"""
import numpy as np
import tensorflow as tf

import estimator_scale as es
from model_zoo import click_data
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


class ClickTables(_Recorded, es.BinaryClassifierModel):
  """A click model as seed 000's users write one: each categorical column's
  ids embedded by a table sharded over the Horovod ranks (split over the
  parameter servers there), with the counts, through one hidden layer.

  The tables start from zeros (the hidden layer's random weights give them
  gradients), the same rows whatever the number of shards: a random
  initializer draws each shard on its own, so a job on ranks would start
  from other rows than one process and never be its fault-free run.
  """

  def logits(self, features, training, params):
    vectors = [tf.reshape(es.sharded_embedding(
        tf.math.floormod(features["ids"][:, i], CLICK_ROWS), CLICK_ROWS, 8,
        name=f"{column}_table",
        initializer=tf.compat.v1.zeros_initializer()), [-1, 8])
               for i, column in enumerate(CLICK_COLUMNS)]
    net = tf.keras.layers.Dense(16, tf.nn.relu, name="hidden",
                                kernel_initializer=_glorot())(
                                    tf.concat(vectors + [features["x"]], 1))
    return tf.keras.layers.Dense(1, name="out",
                                 kernel_initializer=_glorot())(net)

  def serving_features(self):
    return {"x": tf.TensorSpec([len(click_data.INFORMATIVE_NUMERIC)],
                               tf.float32),
            "ids": tf.TensorSpec([len(CLICK_COLUMNS)], tf.int64)}


CLICK_COLUMNS = ("C13", "C16", "C19", "C22")
CLICK_ROWS = 4096


def click_arrays(split, count, seed=0):
  """(features, labels) of `count` generated clicks of `split`: the
  informative counts as log(1 + count) (0 where missing),
  `CLICK_COLUMNS`' hashed ids."""
  features, labels, _ = click_data.generate(split, seed, count)
  counts = np.stack([features[n] for n in click_data.INFORMATIVE_NUMERIC], 1)
  return {"x": np.log1p(np.maximum(np.nan_to_num(counts, nan=0.0),
                                    0.0)).astype(np.float32),
          "ids": np.stack([features[n] for n in CLICK_COLUMNS], 1),
          "id": np.arange(count)}, labels.astype(np.int64)


_DENSE_CASES = {"mlp": TinyMLP, "keras": KerasMLP,
                "keras_model": KerasSubclassed, "autoencoder": TinyAutoencoder}
CASES = tuple(_DENSE_CASES) + ("embedding", "click")


def generated_data(case, count, seed=0):
  """(model, features, labels) for `case`: one of CASES or feature_models.CASES."""
  if case in feature_models.CASES:
    return feature_models.generated_data(case, count, seed)
  if case == "click":
    return (ClickTables(), *click_arrays("train", count, seed))
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

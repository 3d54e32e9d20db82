"""Classifiers of scikit-learn's real handwritten digits (see digits_data)."""
import tensorflow as tf

import estimator_scale as es
from model_zoo import digits_data

_layers = tf.compat.v1.layers


class _Digits(es.ClassifierModel):
  """Shared data and serving inputs of the digits models."""

  def serving_features(self):
    """See base class."""
    return {"image": tf.TensorSpec([8, 8, 1], tf.float32)}

  def input_fn(self, mode, global_batch_size, params, topology=None,
               accumulation_steps=1):
    """See base class."""
    return digits_data.input_fn(mode, global_batch_size, topology,
                                accumulation_steps, seed=params["data_seed"])


@es.register
class DigitsMLP(_Digits):
  """Two-layer perceptron on the 8x8 digits."""

  name = "digits_mlp"

  def default_hparams(self):
    """See base class."""
    return {"hidden_units": [128, 64], "data_seed": 0}

  def logits(self, features, training, params):
    """See base class."""
    net = tf.reshape(features["image"], [-1, 64])
    for i, units in enumerate(params["hidden_units"]):
      net = _layers.dense(net, units, tf.nn.relu, name=f"hidden{i}")
    return _layers.dense(net, 10, name="logits")


@es.register
class DigitsCNN(_Digits):
  """Small convolutional network on the 8x8 digits."""

  name = "digits_cnn"

  def default_hparams(self):
    """See base class."""
    return {"filters": 32, "dense_units": 128, "data_seed": 0}

  def logits(self, features, training, params):
    """See base class."""
    net = features["image"]
    net = _layers.conv2d(net, params["filters"], 3, padding="same",
                         activation=tf.nn.relu, name="conv1")
    net = _layers.conv2d(net, 2 * params["filters"], 3, padding="same",
                         activation=tf.nn.relu, name="conv2")
    net = _layers.max_pooling2d(net, 2, 2, name="pool")
    net = tf.reshape(net, [-1, 4 * 4 * 2 * params["filters"]])
    net = _layers.dense(net, params["dense_units"], tf.nn.relu, name="dense")
    return _layers.dense(net, 10, name="logits")

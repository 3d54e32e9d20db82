"""Models of scikit-learn's real handwritten digits (see digits_data).

Each shows one way to hand the framework a tf.keras network: layers created
inside `logits` (digits_mlp), a `tf.keras.Sequential` from `keras_model`
(digits_cnn), and a functional model with two outputs for a model without
labels (digits_autoencoder).
"""
import tensorflow as tf

import estimator_scale as es
from model_zoo import digits_data

layers = tf.keras.layers


class _DigitsData:
  """The digits' input_fn and serving inputs, shared by the models below."""

  with_labels = True
  """False for a label-free model: its input_fn yields the images alone."""

  def serving_features(self):
    """See base class."""
    return {"image": tf.TensorSpec([8, 8, 1], tf.float32)}

  def feature_spec(self):
    """See base class: the spec the digits' own shards are written with."""
    if self.with_labels:
      return dict(digits_data.FEATURE_SPEC)
    return {"image": digits_data.FEATURE_SPEC["image"]}

  def input_fn(self, mode, global_batch_size, params, topology=None,
               accumulation_steps=1):
    """See base class."""
    return digits_data.input_fn(mode, global_batch_size, topology,
                                accumulation_steps, seed=params["data_seed"],
                                with_labels=self.with_labels)


@es.register
class DigitsMLP(_DigitsData, es.ClassifierModel):
  """Two-layer perceptron on the 8x8 digits, its layers made in `logits`."""

  name = "digits_mlp"

  def default_hparams(self):
    """See base class."""
    return {"hidden_units": [128, 64], "data_seed": 0}

  def logits(self, features, training, params):
    """See base class."""
    net = layers.Flatten(name="flatten")(features["image"])
    for i, units in enumerate(params["hidden_units"]):
      net = layers.Dense(units, activation="relu", name=f"hidden{i}")(net)
    return layers.Dense(10, name="logits")(net)


@es.register
class DigitsCNN(_DigitsData, es.ClassifierModel):
  """Small convolutional network on the 8x8 digits, as a tf.keras.Sequential."""

  name = "digits_cnn"

  def default_hparams(self):
    """See base class."""
    return {"filters": 32, "dense_units": 128, "data_seed": 0}

  def keras_model(self, params):
    """See base class.

    The Input gives every layer its shape, so the weights are made here,
    with the model, rather than on its first call.
    """
    return tf.keras.Sequential([
        tf.keras.Input(shape=(8, 8, 1), name="image"),
        layers.Conv2D(params["filters"], 3, padding="same", activation="relu",
                      name="conv1"),
        layers.Conv2D(2 * params["filters"], 3, padding="same",
                      activation="relu", name="conv2"),
        layers.MaxPooling2D(2, name="pool"),
        layers.Flatten(name="flatten"),
        layers.Dense(params["dense_units"], activation="relu", name="dense"),
        layers.Dense(10, name="logits"),
    ], name="digits_cnn")


@es.register
class DigitsAutoencoder(_DigitsData, es.BaseModel):
  """Squeezes each digit through a small code and rebuilds it; no labels.

  The targets are the images themselves, so the input_fn yields features
  only and Estimator passes labels=None.
  """

  name = "digits_autoencoder"
  with_labels = False

  def default_hparams(self):
    """See base class."""
    return {"hidden_units": 32, "code_units": 8, "data_seed": 0}

  def keras_model(self, params):
    """See base class; outputs {"reconstruction": pixels, "code": code}."""
    image = tf.keras.Input(shape=(8, 8, 1), name="image")
    pixels = layers.Flatten(name="flatten")(image)
    hidden = layers.Dense(params["hidden_units"], activation="relu",
                          name="encoder")(pixels)
    code = layers.Dense(params["code_units"], name="code")(hidden)
    hidden = layers.Dense(params["hidden_units"], activation="relu",
                          name="decoder")(code)
    reconstruction = layers.Dense(64, activation="sigmoid",
                                  name="reconstruction")(hidden)
    return tf.keras.Model(image, {"reconstruction": reconstruction,
                                  "code": code}, name="digits_autoencoder")

  def targets(self, features, labels):
    """The image, flattened to the reconstruction's 64 pixels."""
    del labels
    return tf.reshape(features["image"], [-1, 64])

  def loss(self, labels, logits, params):
    """Mean squared error of the reconstructed pixels."""
    return tf.reduce_mean(tf.square(logits["reconstruction"] - labels))

  def predictions(self, logits, params):
    """The reconstruction (64 pixels) and the code of each image."""
    return dict(logits)

  def eval_metrics(self, labels, logits, params):
    """See base class."""
    return {"mean_squared_error": tf.compat.v1.metrics.mean_squared_error(
        labels=labels, predictions=logits["reconstruction"])}

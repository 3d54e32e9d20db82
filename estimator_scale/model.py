"""The base model users subclass: network, loss, metrics, serving inputs.

No training logic lives here: `model_fn.make_model_fn` is the template that
turns a model into an Estimator model_fn, and it trains through the same
public `build_train_op` a hand-written model_fn calls.
"""
import abc

import tensorflow as tf


class BaseModel(abc.ABC):
  """A model: network, loss, metrics, predictions and serving inputs.

  Subclasses build the network in `logits` (any style: tf.keras.layers
  created right there, v1 layers, get_variable) or return a tf.keras.Model
  from `keras_model`, and implement `loss` and `serving_features`; models
  with built-in data also implement `input_fn`. Methods receive `params`,
  the model's hyperparameters (`default_hparams` updated by `--hparams`).
  Each graph Estimator builds calls the network once per replica, whatever
  the accumulation steps, so layers are created once.
  """

  name = None
  """The registry name (`estimator-scale models` lists them)."""

  label_key = "label"
  """The label's name in data files (`feature_spec`, `--train_data`)."""

  serving_examples = False
  """Whether the SavedModel takes serialized tf.train.Examples (one string
  input, `examples`) and parses them with `feature_spec()` less the label,
  as TF Serving's classify and regress APIs and canned estimators' exports
  expect, instead of one input per serving feature. The export then reads
  what the data files hold, values left out included (sparse ids)."""

  def default_hparams(self):
    """Hyperparameters and their defaults; their types are enforced."""
    return {}

  def keras_model(self, params):
    """A tf.keras.Model (Sequential, functional or subclassed), or None.

    Built once per graph and replica, before the network runs; the default
    `logits` is not used then: the model is called on `keras_inputs`.
    """
    del params
    return None

  def keras_inputs(self, features):
    """What `keras_model`'s model is called on: the only feature, else all."""
    if isinstance(features, dict) and len(features) == 1:
      return next(iter(features.values()))
    return features

  def logits(self, features, training, params):
    """Builds the network and returns its output for a batch of features."""
    raise NotImplementedError(
        f"model {self.name or type(self).__name__!r} must implement logits() "
        "or keras_model()")

  def targets(self, features, labels):
    """What `loss` and `eval_metrics` compare the outputs with.

    The labels by default; a label-free model (autoencoder, language model)
    derives them from its features, and its input_fn yields features only.
    """
    del features
    return labels

  @abc.abstractmethod
  def loss(self, labels, logits, params):
    """The scalar mean loss of a batch; `labels` are `targets(...)`."""

  @abc.abstractmethod
  def serving_features(self):
    """{feature name: tf.TensorSpec without the batch axis} for exports."""

  def predictions(self, logits, params):
    """{name: tensor} returned by `predict` and the SavedModel."""
    return {"outputs": logits}

  def eval_metrics(self, labels, logits, params):
    """{name: tf.compat.v1.metrics pair}; the loss is added automatically."""
    return {}

  def training_hooks(self, features, labels):
    """Extra SessionRunHooks for training (see tf.estimator.EstimatorSpec)."""
    return []

  def input_fn(self, mode, global_batch_size, params, topology=None,
               accumulation_steps=1):
    """An Estimator input_fn of the model's own data for `mode`.

    `Estimator.model_input_fn` calls this with the right topology.

    Args:
      mode: `ModeKeys.TRAIN` (repeats, shuffled, sharded per worker) or
        `ModeKeys.EVAL` (the held-out split, one pass).
      global_batch_size: examples per update over the whole job.
      params: the model's hyperparameters.
      topology: this process's Topology, for sharding and per-replica batch.
      accumulation_steps: micro-batches per update, to check divisibility.
    """
    raise NotImplementedError(
        f"model {self.name or type(self).__name__!r} ships no data; pass your "
        "own input_fn to estimator.train/evaluate")

  def label_feature(self):
    """How one record's label is parsed, or None for a label-free model."""
    return None

  def feature_spec(self):
    """{name: tf.io.FixedLenFeature} of one record in data files.

    What `--train_data`/`--eval_data` read (TFRecord Examples or CSV
    columns): the serving features, and the label under `label_key`.
    Override it when the files hold more or other features than serving.
    """
    spec = {name: tf.io.FixedLenFeature(tensor.shape, tensor.dtype)
            for name, tensor in self.serving_features().items()}
    label = self.label_feature()
    if label is not None:
      spec[self.label_key] = label
    return spec

  def serving_input_receiver_fn(self):
    """Placeholders for `serving_features`, batch axis unknown; or one for
    serialized tf.train.Examples (`serving_examples`)."""
    if self.serving_examples:
      spec = dict(self.feature_spec())
      spec.pop(self.label_key, None)
      return tf.estimator.export.build_parsing_serving_input_receiver_fn(spec)
    specs = self.serving_features()

    def receiver():
      placeholders = {
          name: tf.compat.v1.placeholder(spec.dtype, [None] + list(spec.shape),
                                         name=name)
          for name, spec in specs.items()}
      return tf.estimator.export.ServingInputReceiver(placeholders,
                                                      placeholders)
    return receiver


class ClassifierModel(BaseModel):
  """A classifier: `logits` returns unnormalised class scores, labels are ids.

  Provides the softmax cross-entropy loss, accuracy and the usual
  predictions; a subclass only builds the network.
  """

  def label_feature(self):
    """See base class: a class id."""
    return tf.io.FixedLenFeature([], tf.int64)

  def loss(self, labels, logits, params):
    """See base class."""
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(tf.reshape(labels, [-1]), tf.int32), logits=logits))

  def predictions(self, logits, params):
    """See base class."""
    return {"classes": tf.argmax(logits, axis=-1),
            "probabilities": tf.nn.softmax(logits), "logits": logits}

  def eval_metrics(self, labels, logits, params):
    """See base class."""
    return {"accuracy": tf.compat.v1.metrics.accuracy(
        labels=tf.reshape(labels, [-1]),
        predictions=tf.argmax(logits, axis=-1))}


class RegressionModel(BaseModel):
  """A regression: `logits` returns predictions; mean squared error."""

  def label_feature(self):
    """See base class: one number."""
    return tf.io.FixedLenFeature([1], tf.float32)

  def loss(self, labels, logits, params):
    """See base class."""
    return tf.reduce_mean(tf.square(logits - tf.cast(labels, logits.dtype)))

  def predictions(self, logits, params):
    """See base class."""
    return {"predictions": logits}

  def eval_metrics(self, labels, logits, params):
    """See base class."""
    return {"mean_squared_error": tf.compat.v1.metrics.mean_squared_error(
        labels=tf.cast(labels, logits.dtype), predictions=logits)}

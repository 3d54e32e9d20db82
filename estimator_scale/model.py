"""The base model users subclass: network, loss, metrics, serving inputs."""
import abc

import tensorflow as tf

from estimator_scale import errors


class BaseModel(abc.ABC):
  """A model: network, loss, metrics, predictions and serving inputs.

  Subclasses build the network in `logits` or `keras_model` (built once per
  replica per graph whatever k), and implement `loss` and `serving_features`.
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
    """A tf.keras.Model to call on `keras_inputs` in place of `logits`."""
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
        f"{_described(self)} must implement logits() or keras_model()")

  def targets(self, features, labels):
    """What `loss` and `eval_metrics` compare outputs with: labels, or for a
    label-free model something derived from its features."""
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
    """{name: a v1 metric (value, update) pair or an updated Keras Metric}; the
    loss is added."""
    return {}

  def training_hooks(self, features, labels):
    """Extra SessionRunHooks for training (see tf.estimator.EstimatorSpec)."""
    return []

  def input_fn(self, mode, global_batch_size, params, topology=None,
               accumulation_steps=1):
    """An Estimator input_fn of the model's own data for `mode`.

    Args:
      mode: `ModeKeys.TRAIN` (repeated, shuffled, sharded) or `EVAL` (one pass).
      global_batch_size: examples per update over the whole job.
      params: the model's hyperparameters.
      topology: this process's Topology, for sharding and per-replica batch.
      accumulation_steps: micro-batches per update, to check divisibility.
    """
    raise NotImplementedError(
        f"{_described(self)} ships no data; pass your own input_fn to "
        "estimator.train/evaluate")

  def label_feature(self):
    """How one record's label is parsed, or None for a label-free model."""
    return None

  def feature_spec(self):
    """{name: tf.io.FixedLenFeature} of a record: serving features and label."""
    spec = {name: tf.io.FixedLenFeature(tensor.shape, tensor.dtype)
            for name, tensor in self.serving_features().items()}
    label = self.label_feature()
    if label is not None:
      spec[self.label_key] = label
    return spec

  def serving_input_receiver_fn(self):
    """Placeholders for `serving_features`, or for serialized Examples."""
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
  """A classifier: `logits` returns [batch, classes >= 2]; labels are ids."""

  def label_feature(self):
    """See base class: a class id."""
    return _class_id()

  def loss(self, labels, logits, params):
    """See base class."""
    logits = self._checked_logits(logits)
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(tf.reshape(labels, [-1]), tf.int32), logits=logits))

  def predictions(self, logits, params):
    """See base class."""
    logits = self._checked_logits(logits)
    return {"classes": tf.argmax(logits, axis=-1),
            "probabilities": tf.nn.softmax(logits), "logits": logits}

  def eval_metrics(self, labels, logits, params):
    """See base class."""
    logits = self._checked_logits(logits)
    return {"accuracy": _accuracy(labels, tf.argmax(logits, axis=-1))}

  def _checked_logits(self, logits):
    """`logits`, refused with one score per example (softmax over one class is
    always 1; label 1 out of range gives a NaN loss on GPU)."""
    if logits.shape.rank and logits.shape[-1] == 1:
      raise errors.ConfigError(
          f"{_described(self)}: a ClassifierModel's logits are one score "
          "per class, 2 or more, [batch, classes]; its logits have shape "
          f"{_shape(logits.shape)}, one per example. For one logit per "
          "example (clicked or not, labels 0/1) subclass "
          "BinaryClassifierModel")
    return logits


class BinaryClassifierModel(BaseModel):
  """A binary classifier: one logit per example, labels 0 or 1, as TF's canned
  binary classifiers."""

  auc_thresholds = 1000
  """Thresholds of the AUC metrics' curves (Keras' AUC, interpolated)."""

  def label_feature(self):
    """See base class: clicked (1) or not (0), as an id."""
    return _class_id()

  def loss(self, labels, logits, params):
    """See base class: the mean sigmoid cross-entropy (log loss)."""
    logits = self._checked_logits(logits)
    labels = self._labels(labels, logits)
    return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
        labels=labels, logits=logits))

  def predictions(self, logits, params):
    """See base class: `logistic`, `logits` and `class_ids`, [batch, 1]."""
    return _binary_predictions(self._checked_logits(logits))

  def eval_metrics(self, labels, logits, params):
    """See base class: AUCs, precision, recall, accuracy, means, calibration."""
    logits = self._checked_logits(logits)
    labels = self._labels(labels, logits)
    predicted = _binary_predictions(logits)
    probabilities, class_ids = predicted["logistic"], predicted["class_ids"]
    metrics = {"accuracy": _accuracy(labels, class_ids)}
    for key, curve in (("auc", "ROC"), ("auc_precision_recall", "PR")):
      metric = tf.keras.metrics.AUC(num_thresholds=self.auc_thresholds,
                                    curve=curve, name=key)
      metric.update_state(labels, probabilities)
      metrics[key] = metric
    positive = tf.cast(labels, tf.bool)
    metrics["precision"] = tf.compat.v1.metrics.precision(
        labels=positive, predictions=tf.cast(class_ids, tf.bool))
    metrics["recall"] = tf.compat.v1.metrics.recall(
        labels=positive, predictions=tf.cast(class_ids, tf.bool))
    predicted_mean, predicted_update = tf.compat.v1.metrics.mean(
        probabilities, name="prediction_mean")
    label_mean, label_update = tf.compat.v1.metrics.mean(labels,
                                                         name="label_mean")
    metrics["prediction/mean"] = (predicted_mean, predicted_update)
    metrics["label/mean"] = (label_mean, label_update)
    metrics["calibration"] = (
        tf.math.divide_no_nan(predicted_mean, label_mean),
        tf.group(predicted_update, label_update))
    return metrics

  def _checked_logits(self, logits):
    """`logits` as [batch, 1]; ConfigError unless one logit per example."""
    shape = logits.shape
    if shape.rank == 1:
      return tf.expand_dims(logits, -1)
    if shape.rank is None or shape.rank < 2 or shape[-1] != 1:
      raise errors.ConfigError(
          f"{_described(self)}: a BinaryClassifierModel's logits are one "
          "per example, [batch, 1] (end the network with "
          "tf.keras.layers.Dense(1)); its logits have shape "
          f"{_shape(shape)}. For one score per class (2 or more) subclass "
          "ClassifierModel")
    return logits

  def _labels(self, labels, logits):
    """The labels as floats of the logits' shape, checked in [0, 1] when run."""
    labels = _labels_like(labels, logits)
    with tf.control_dependencies([
        tf.debugging.assert_greater_equal(
            labels, tf.zeros([], labels.dtype),
            message=f"{_described(self)}: labels must be 0 or 1"),
        tf.debugging.assert_less_equal(
            labels, tf.ones([], labels.dtype),
            message=f"{_described(self)}: labels must be 0 or 1")]):
      return tf.identity(labels)


class RegressionModel(BaseModel):
  """A regression: mean squared error, labels reshaped to the predictions'
  shape so they never broadcast into [batch, batch]."""

  def label_feature(self):
    """See base class: one number."""
    return tf.io.FixedLenFeature([1], tf.float32)

  def loss(self, labels, logits, params):
    """See base class."""
    return tf.reduce_mean(tf.square(logits - _labels_like(labels, logits)))

  def predictions(self, logits, params):
    """See base class."""
    return {"predictions": logits}

  def eval_metrics(self, labels, logits, params):
    """See base class."""
    return {"mean_squared_error": tf.compat.v1.metrics.mean_squared_error(
        labels=_labels_like(labels, logits), predictions=logits)}


def _described(model):
  """How messages name a model: its registry name, else its class."""
  return f"model {model.name or type(model).__name__!r}"


def _shape(shape):
  return "unknown" if shape.rank is None else str(tuple(shape.as_list()))


def _class_id():
  """The label feature of a classifier: one class id per record."""
  return tf.io.FixedLenFeature([], tf.int64)


def _labels_like(labels, outputs):
  """`labels` in the outputs' dtype and shape (as many values each)."""
  return tf.reshape(tf.cast(labels, outputs.dtype), tf.shape(outputs))


def _binary_predictions(logits):
  """{logistic, logits, class_ids} of [batch, 1] logits, as the canned head."""
  return {"logistic": tf.sigmoid(logits), "logits": logits,
          "class_ids": tf.cast(logits > 0, tf.int64)}


def _accuracy(labels, class_ids):
  """The share of examples whose predicted class id is the label."""
  return tf.compat.v1.metrics.accuracy(
      labels=tf.reshape(tf.cast(labels, tf.int64), [-1]),
      predictions=tf.reshape(class_ids, [-1]))

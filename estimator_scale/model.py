"""The base model to subclass, and the template that makes it an Estimator model_fn.

A subclass describes the network and its loss in a few methods; `model_fn`
(the one concrete template) turns that into TRAIN, EVAL and PREDICT
EstimatorSpecs, with the training half delegated to `train_ops.pipeline` so
accumulation, lr scaling, AdaScale and cross-worker reduction apply to every
model alike.
"""
import abc
import random

import numpy as np
import tensorflow as tf

from estimator_scale.train_ops import adascale
from estimator_scale.train_ops import pipeline

ModeKeys = tf.estimator.ModeKeys


class BaseModel(abc.ABC):
  """A model: network, loss, metrics, predictions and serving inputs.

  Subclasses implement `logits`, `loss` and `serving_features`; models with
  built-in data also implement `input_fn`. Methods receive `params`, the
  model's hyperparameters (`default_hparams` updated by `--hparams`).
  """

  name = None
  """The registry name (`estimator-scale models` lists them)."""

  def default_hparams(self):
    """Hyperparameters and their defaults; their types are enforced."""
    return {}

  @abc.abstractmethod
  def logits(self, features, training, params):
    """Builds the network and returns its output for a batch of features."""

  @abc.abstractmethod
  def loss(self, labels, logits, params):
    """The scalar mean loss of a batch."""

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

  def model_fn(self, features, labels, mode, params, config, training_config,
               topology):
    """The template: one EstimatorSpec for any mode.

    Args:
      features, labels, mode, params, config: as Estimator passes them.
      training_config: `train_ops.pipeline.TrainingConfig`.
      topology: this process's `Topology`.

    Returns:
      A `tf.estimator.EstimatorSpec`.
    """
    if config is not None and config.tf_random_seed is not None:
      _seed_layer_initializers(config.tf_random_seed)
    if mode == ModeKeys.PREDICT:
      logits = self._network(features, False, params)
      return tf.estimator.EstimatorSpec(
          mode, predictions=self.predictions(logits, params),
          export_outputs=self._export_outputs(logits, params))
    if mode == ModeKeys.EVAL:
      logits = self._network(features, False, params)
      loss = self.loss(labels, logits, params)
      return tf.estimator.EstimatorSpec(
          mode, loss=loss,
          eval_metric_ops=self.eval_metrics(labels, logits, params))

    def compute_loss(micro_features, micro_labels):
      return self.loss(micro_labels,
                       self._network(micro_features, True, params), params)

    built = pipeline.build_train_op(compute_loss, features, labels,
                                    training_config, topology)
    tf.compat.v1.summary.scalar("learning_rate", built.learning_rate)
    if built.adascale is not None:
      adascale.summaries(built.adascale)
    return tf.estimator.EstimatorSpec(
        mode, loss=_reported_loss(built.loss), train_op=built.train_op,
        training_hooks=self.training_hooks(features, labels))

  def _network(self, features, training, params):
    # Every micro-batch calls the network again; the scope makes the calls
    # share variables (layers must be named, or use tf.compat.v1.get_variable).
    with tf.compat.v1.variable_scope("model", reuse=tf.compat.v1.AUTO_REUSE):
      return self.logits(features, training, params)

  def _export_outputs(self, logits, params):
    outputs = self.predictions(logits, params)
    return {tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY:
                tf.estimator.export.PredictOutput(outputs)}

  def serving_input_receiver_fn(self):
    """Placeholders for `serving_features`, batch axis unknown."""
    specs = self.serving_features()

    def receiver():
      placeholders = {
          name: tf.compat.v1.placeholder(spec.dtype, [None] + list(spec.shape),
                                         name=name)
          for name, spec in specs.items()}
      return tf.estimator.export.ServingInputReceiver(placeholders,
                                                      placeholders)
    return receiver


def _seed_layer_initializers(seed):
  """Makes `random_seed` fix the initial weights too.

  tf.compat.v1.layers create weights with Keras initializers, which take
  their op seeds from Keras' own generator (else from Python's `random`),
  not from the graph seed RunConfig sets. Keras' public setter also reseeds
  Python and NumPy; their states are put back so a user's own randomness
  is not reset each time Estimator builds a graph.
  """
  python_state, numpy_state = random.getstate(), np.random.get_state()
  tf.keras.utils.set_random_seed(seed)
  random.setstate(python_state)
  np.random.set_state(numpy_state)


def _reported_loss(loss):
  """The loss Estimator logs: under tf.distribute it sums replicas' losses."""
  context = tf.distribute.get_replica_context()
  if context is not None and context.num_replicas_in_sync > 1:
    return loss / context.num_replicas_in_sync
  return loss


class ClassifierModel(BaseModel):
  """A classifier: `logits` returns unnormalised class scores, labels are ids.

  Provides the softmax cross-entropy loss, accuracy and the usual
  predictions; a subclass only builds the network.
  """

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

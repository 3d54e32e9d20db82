"""The template: a `BaseModel` as an Estimator model_fn, for every mode."""
import contextlib
import functools
import random

import numpy as np
import tensorflow as tf

from estimator_scale import errors
from estimator_scale import resume
from estimator_scale.train_ops import pipeline
from estimator_scale import precision as precision_lib

ModeKeys = tf.estimator.ModeKeys
SCOPE = "model"
"""Variable scope of every model's variables (checkpoint names start here)."""


def make_model_fn(model, training_config=None, topology=None):
  """An Estimator model_fn for `model` (a BaseModel instance).

  Args:
    model: the `BaseModel`.
    training_config, topology: None: the Estimator's.

  Returns:
    model_fn(features, labels, mode, params, config) -> EstimatorSpec.
  """
  model = _Attributed(model)

  def model_fn(features, labels, mode, params, config):
    training, job = pipeline.estimator_settings(
        training_config, topology, caller="make_model_fn")
    network = _network(model, params, training.precision)
    if mode == ModeKeys.PREDICT:
      outputs = network(features, False)
      return tf.estimator.EstimatorSpec(
          mode, predictions=model.predictions(outputs, params),
          export_outputs=_export_outputs(model, outputs, params))
    if mode == ModeKeys.EVAL:
      outputs = network(features, False)
      targets = model.targets(features, labels)
      return tf.estimator.EstimatorSpec(
          mode, loss=model.loss(targets, outputs, params),
          eval_metric_ops=model.eval_metrics(targets, outputs, params))

    def loss_fn(micro_features, micro_labels):
      return model.loss(model.targets(micro_features, micro_labels),
                        network(micro_features, True), params)

    built = pipeline.build_train_op(loss_fn, features, labels, training,
                                    job)
    # A checkpoint of another recipe restores what it has; see resume.py.
    scaffold = (resume.training_scaffold(config, SCOPE, job.is_chief)
                if config is not None and config.model_dir else None)
    return tf.estimator.EstimatorSpec(
        mode, loss=built.loss, train_op=built.train_op, scaffold=scaffold,
        training_hooks=model.training_hooks(features, labels))
  return model_fn


class _Attributed:
  """The model, whose methods name themselves in what they raise: a shape bug
  otherwise surfaces deep in graph building."""

  def __init__(self, model):
    self._model = model

  def __getattr__(self, name):
    attribute = getattr(self._model, name)
    if name.startswith("_") or not callable(attribute):
      return attribute

    @functools.wraps(attribute)
    def call(*args, **kwargs):
      try:
        return attribute(*args, **kwargs)
      except Exception as e:  # pylint: disable=broad-except
        errors.note_model_method(e, f"{type(self._model).__name__}.{name}")
        raise
    return call


def _network(model, params, precision):
  """(features, training) -> float32 outputs, variables under `model/`; a
  `keras_model` is built here, outside the accumulation loop."""
  with _model_scope(precision):
    keras_model = model.keras_model(params)

  def network(features, training):
    with _model_scope(precision):
      inputs = precision_lib.cast_floating(
          features, precision_lib.compute_dtype(precision))
      if keras_model is not None:
        outputs = keras_model(model.keras_inputs(inputs), training=training)
      else:
        outputs = model.logits(inputs, training, params)
    return precision_lib.cast_floating(outputs, tf.float32)
  return network


@contextlib.contextmanager
def _model_scope(precision):
  """`model/` for variable names in any graph or loop, so checkpoint names
  match across training, evaluation and export."""
  with tf.compat.v1.variable_scope(SCOPE, reuse=tf.compat.v1.AUTO_REUSE,
                                   auxiliary_name_scope=False):
    with tf.compat.v1.name_scope(SCOPE + "/"), \
        precision_lib.network_scope(precision):
      yield


def _export_outputs(model, outputs, params):
  return {tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY:
              tf.estimator.export.PredictOutput(
                  model.predictions(outputs, params))}


def seed_layer_initializers(config):
  """Makes `random_seed` fix any model_fn's Keras weights too: Keras seeds
  them from Python's `random`, not the graph; Python's and NumPy's states,
  which Keras reseeds, are restored."""
  if config is None or config.tf_random_seed is None:
    return
  seed = config.tf_random_seed
  python_state, numpy_state = random.getstate(), np.random.get_state()
  tf.keras.utils.set_random_seed(seed)
  random.setstate(python_state)
  np.random.set_state(numpy_state)

"""The contract every model of the zoo keeps: train (with and without
accumulation), evaluate, predict, export, reload the SavedModel and predict
the same values, and no deprecation warning from the model zoo's code."""
import contextlib
import logging
import os
import warnings

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.util import deprecation as tf_deprecation  # pylint: disable=g-direct-tensorflow-import

import estimator_scale as es
from estimator_scale import registry
import model_zoo
from tests.helpers import records

ModeKeys = tf.estimator.ModeKeys
ZOO_DIR = os.path.dirname(os.path.abspath(model_zoo.__file__))
# Only the zoo's: other test modules register models of their own (data
# they are given, no data set of their own) in the same process.
ZOO_MODELS = [name for name in registry.names()
              if type(registry.get(name)).__module__.startswith("model_zoo.")]


def _estimator(model, model_dir, **training):
  return es.make_estimator(model, model_dir=str(model_dir), random_seed=0,
                           training_config=es.TrainingConfig(
                               learning_rate=0.01,
                               **training))


def _is_zoo_deprecation(warning):
  """Whether a recorded warning is a deprecation raised from model_zoo code.

  Deprecated TensorFlow and Keras calls (tf.compat.v1.layers among them)
  warn with the caller's file, so a zoo model using one shows up here.
  """
  deprecation = issubclass(
      warning.category, (DeprecationWarning, PendingDeprecationWarning)) or (
          "deprecated" in str(warning.message))
  return deprecation and os.path.abspath(warning.filename).startswith(
      ZOO_DIR + os.sep) and not _is_feature_column(str(warning.message))


def _is_feature_column(message):
  """TF 2.15 marks every tf.feature_column function deprecated in favour of
  Keras preprocessing layers, which canned estimators cannot take: the wide
  & deep model uses feature columns on purpose, for the Estimator users who
  do."""
  return "tensorflow.python.feature_column" in message


class _LogRecords(logging.Handler):

  def __init__(self):
    super().__init__()
    self.messages = []

  def emit(self, record):
    self.messages.append(record.getMessage())


@contextlib.contextmanager
def no_deprecation_from_zoo():
  """Fails if model_zoo code warns of a deprecated API inside the block.

  Python warnings (Keras, v1 layers) and TensorFlow's own deprecation log
  lines ("From <file>:<line>: ... is deprecated") that name a zoo file both
  count (ops behind TensorFlow's dispatch name dispatch.py instead, so those
  are not caught). Every warning is recorded
  ("always"), and TensorFlow's once-per-function memory is cleared, so one
  shown earlier in the process, or hidden by pytest.ini's filters, counts.
  """
  tf_deprecation._PRINTED_WARNING.clear()  # pylint: disable=protected-access
  handler = _LogRecords()
  tf.get_logger().addHandler(handler)
  try:
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      yield
  finally:
    tf.get_logger().removeHandler(handler)
  found = [f"{w.filename}:{w.lineno}: {w.message}" for w in caught
           if _is_zoo_deprecation(w)]
  found += [m for m in handler.messages
            if "is deprecated" in m and f"From {ZOO_DIR}{os.sep}" in m
            and not _is_feature_column(m)]
  assert not found, "deprecation warnings from model_zoo:\n" + "\n".join(found)


@pytest.mark.parametrize("name", ZOO_MODELS)
def test_model_contract(name, tmp_path):
  model = registry.get(name)
  estimator = _estimator(model, tmp_path / "model")
  batch = 8
  features = {}
  for key, spec in model.serving_features().items():
    shape = [4] + list(spec.shape)
    features[key] = np.random.RandomState(0).uniform(size=shape).astype(
        spec.dtype.as_numpy_dtype)

  with no_deprecation_from_zoo():
    estimator.train(estimator.model_input_fn(ModeKeys.TRAIN, batch),
                    max_steps=3)
    metrics = estimator.evaluate(
        estimator.model_input_fn(ModeKeys.EVAL, batch), steps=2)
    predicted = list(estimator.predict(
        lambda: tf.data.Dataset.from_tensor_slices(features).batch(4),
        yield_single_examples=False))[0]
    path = estimator.export_saved_model(str(tmp_path / "export"))
  assert estimator.get_variable_value("global_step") == 3
  assert np.isfinite(metrics["loss"])

  loaded = tf.saved_model.load(path.decode() if isinstance(path, bytes)
                               else path)
  serve = loaded.signatures["serving_default"]
  if model.serving_examples:
    served = serve(examples=tf.constant(
        records.serialized_examples(features, tmp_path / "examples")))
  else:
    served = serve(**{k: tf.constant(v) for k, v in features.items()})
  for key, value in predicted.items():
    np.testing.assert_allclose(served[key].numpy(), value, rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("name", ZOO_MODELS)
def test_model_trains_with_accumulation_and_adascale(name, tmp_path):
  """4 micro-batches of 4 per update; evaluation then restores by name."""
  model = registry.get(name)
  estimator = _estimator(model, tmp_path, accumulation_steps=4,
                         lr_scaling="adascale")
  with no_deprecation_from_zoo():
    estimator.train(estimator.model_input_fn(ModeKeys.TRAIN, 16), max_steps=2)
    metrics = estimator.evaluate(
        estimator.model_input_fn(ModeKeys.EVAL, 16), steps=1)
  assert estimator.get_variable_value("global_step") == 2
  assert np.isfinite(metrics["loss"])


def _initial_weights(tmp_path, name, seed):
  model = registry.get("digits_mlp")
  estimator = es.make_estimator(model, model_dir=str(tmp_path / name),
                                random_seed=seed)
  estimator.train(estimator.model_input_fn(ModeKeys.TRAIN, 8), max_steps=1)
  checkpoint = str(tmp_path / name / "model.ckpt-0")
  return {n: tf.train.load_variable(checkpoint, n)
          for n, _ in tf.train.list_variables(checkpoint)
          if n.startswith("model/")}


def test_random_seed_fixes_initial_weights(tmp_path):
  first = _initial_weights(tmp_path, "a", seed=7)
  again = _initial_weights(tmp_path, "b", seed=7)
  other = _initial_weights(tmp_path, "c", seed=8)
  assert first and first.keys() == again.keys()
  for name, value in first.items():
    np.testing.assert_array_equal(value, again[name], err_msg=name)
  assert any(not np.array_equal(value, other[name])
             for name, value in first.items() if "kernel" in name)

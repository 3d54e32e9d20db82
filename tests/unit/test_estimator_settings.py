"""One TrainingConfig and one Topology per Estimator: a hand-written
model_fn's `build_train_op` takes the Estimator's where it is given none,
and refuses, in one line naming both, one that says otherwise."""
import random

import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale import backends
from estimator_scale.train_ops import pipeline
from tests.workers import tiny_models

_FEATURES = {"x": np.random.RandomState(0).randn(32, 3).astype(np.float32)}
_LABELS = np.random.RandomState(1).randint(0, 2, 32)


def _model_fn(**build_args):
  """A model_fn as TF's guide writes it; `build_args` go to build_train_op
  (training_config, topology; left out: the Estimator's)."""

  def model_fn(features, labels, mode):
    def loss_fn(micro_features, micro_labels):
      logits = tf.keras.layers.Dense(2, name="out")(micro_features["x"])
      return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
          micro_labels, logits))
    train = es.build_train_op(loss_fn, features, labels, **build_args)
    return tf.estimator.EstimatorSpec(mode, loss=train.loss,
                                      train_op=train.train_op)
  return model_fn


def _train(model_fn, model_dir, training_config=None, steps=2):
  scale_config = es.build_run_config("none", model_dir=str(model_dir),
                                     random_seed=0)
  estimator = es.make_estimator(model_fn, scale_config=scale_config,
                                training_config=training_config)
  estimator.train(es.inputs.from_arrays(_FEATURES, _LABELS, 8, seed=None),
                  max_steps=steps)
  return estimator


def test_build_train_op_without_a_training_config_takes_the_estimators(
    tmp_path):
  estimator = _train(_model_fn(), tmp_path,
                     es.TrainingConfig(accumulation_steps=4,
                                       lr_scaling="adascale"))
  # 2 updates of 4 micro-batches, with AdaScale's state: the Estimator's.
  assert estimator.get_variable_value(pipeline.MICRO_BATCHES) == 8
  assert estimator.get_variable_value(es.ADASCALE_SCALE) == 4.0


def test_build_train_op_with_another_training_config_is_refused(tmp_path):
  mine = es.TrainingConfig(accumulation_steps=2)
  theirs = es.TrainingConfig(accumulation_steps=4, lr_scaling="adascale")
  with pytest.raises(es.errors.ConfigError) as raised:
    _train(_model_fn(training_config=mine), tmp_path / "a", theirs)
  message = str(raised.value)
  assert message == (
      "build_train_op was given a training_config with accumulation_steps=2, "
      "lr_scaling='identity' but the Estimator's (make_estimator("
      "training_config=...)) has accumulation_steps=4, "
      "lr_scaling='adascale': leave training_config out to take the "
      "Estimator's, or pass estimator.training_config")
  assert not tf.io.gfile.glob(str(tmp_path / "a" / "model.ckpt-*"))
  # The same one (or an equal one) is taken.
  _train(_model_fn(training_config=es.TrainingConfig(
      accumulation_steps=4, lr_scaling="adascale")), tmp_path / "b", theirs)


def test_a_model_fns_own_config_applies_where_make_estimator_got_none(
    tmp_path):
  estimator = _train(
      _model_fn(training_config=es.TrainingConfig(accumulation_steps=2)),
      tmp_path)
  assert estimator.get_variable_value(pipeline.MICRO_BATCHES) == 4


def test_build_train_op_with_another_topology_is_refused(tmp_path):
  other = es.Topology(backend=backends.get("horovod"), num_workers=2)
  with pytest.raises(es.errors.ConfigError,
                     match=r"^build_train_op was given topology\(backend="
                     r"'horovod', synchronous=True, num_workers=2, .*\) but "
                     r"the Estimator runs topology\(backend='none', "
                     r"synchronous=True, num_workers=1, .*\) \(backend, "
                     r"num_workers differ\): leave topology out to take the "
                     r"Estimator's, or pass estimator\.topology$"):
    _train(_model_fn(topology=other), tmp_path)


def test_make_model_fn_takes_the_estimators_too(tmp_path):
  """The template as a public function: inside make_estimator's Estimator
  its None are the Estimator's, another config is refused."""
  model, features, labels = tiny_models.generated_data("mlp", 32)
  scale_config = es.build_run_config("none", model_dir=str(tmp_path / "a"),
                                     random_seed=0)
  config = es.TrainingConfig(accumulation_steps=2)
  estimator = es.make_estimator(es.make_model_fn(model),
                                scale_config=scale_config,
                                training_config=config)
  estimator.train(es.inputs.from_arrays(features, labels, 8, seed=None),
                  max_steps=1)
  assert estimator.get_variable_value(pipeline.MICRO_BATCHES) == 2
  scale_config = es.build_run_config("none", model_dir=str(tmp_path / "b"))
  estimator = es.make_estimator(
      es.make_model_fn(model, es.TrainingConfig(accumulation_steps=4)),
      scale_config=scale_config, training_config=config)
  with pytest.raises(es.errors.ConfigError,
                     match=r"^make_model_fn was given a training_config with "
                     r"accumulation_steps=4 but the Estimator's"):
    estimator.train(es.inputs.from_arrays(features, labels, 8, seed=None),
                    max_steps=1)


def test_outside_an_estimator_of_the_framework_the_defaults_apply():
  with tf.Graph().as_default():
    features = {"x": tf.constant(_FEATURES["x"][:8])}
    labels = tf.constant(_LABELS[:8])
    train = es.build_train_op(
        lambda f, l: tf.reduce_mean(tf.keras.layers.Dense(1)(f["x"])),
        features, labels)
    assert train.adascale is None
    config, topology = pipeline.estimator_settings()
    assert config == es.TrainingConfig() and topology == es.Topology()


def test_random_seed_fixes_a_hand_written_model_fns_keras_weights(tmp_path):
  # Keras draws an unseeded initializer's seed from Python's `random`, which
  # the test moves on between the two Estimators.
  kernels = []
  for run in ("a", "b"):
    estimator = _train(_model_fn(), tmp_path / run, steps=1)
    kernels.append(estimator.get_variable_value("out/kernel"))
    random.random()
  np.testing.assert_array_equal(kernels[0], kernels[1])

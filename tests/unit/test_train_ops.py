"""Accumulation, lr scaling and AdaScale on one process (in-process Estimators)."""
import math

import horovod.tensorflow as hvd
import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale.backends.horovod import reducer
from estimator_scale.backends.horovod import stop
from estimator_scale.train_ops import optimizers
from estimator_scale.train_ops import scaling
from tests.helpers import golden
from tests.helpers import trainer
from tests.helpers.results import max_difference
from tests.workers import tiny_models


def _model_vars(estimator):
  return {n: estimator.get_variable_value(n)
          for n in estimator.get_variable_names() if n.startswith("model/")
          and "/Momentum" not in n and "/Adam" not in n}


@pytest.mark.parametrize("rows,gain,tolerance", golden.GAINS)
def test_adascale_golden_gain_with_accumulation(rows, gain, tolerance,
                                                tmp_path):
  x = np.array(rows, np.float32)
  estimator = trainer.train(tiny_models.SumLinear(2, True),
                            {"x": x, "id": np.arange(2)}, np.zeros(2),
                            tmp_path / "g", 2, 1, optimizer="sgd",
                            accumulation_steps=2, lr_scaling="adascale")
  assert estimator.get_variable_value("adascale/gain") == pytest.approx(
      gain, abs=tolerance)
  assert estimator.get_variable_value("adascale/scale") == 2.0
  assert estimator.get_variable_value("adascale/progress") == pytest.approx(
      gain, abs=tolerance)


def test_adascale_smoothing_zero_takes_each_update_alone(tmp_path):
  # Update 1 alone has gain 4/3, update 2 alone gain 2 (the golden rows).
  x = np.array([[1, 0], [0, 1], [-1, 1], [1, -1]], np.float32)
  gains = {}
  for theta in (None, 0.0):
    estimator = trainer.train(tiny_models.SumLinear(2, True),
                              {"x": x, "id": np.arange(4)}, np.zeros(4),
                              tmp_path / f"theta-{theta}", 2, 2,
                              optimizer="sgd", accumulation_steps=2,
                              lr_scaling="adascale", adascale_smoothing=theta)
    gains[theta] = estimator.get_variable_value("adascale/gain")
  assert gains[0.0] == pytest.approx(2.0, abs=1e-6)
  assert 4 / 3 + 0.1 < gains[None] < 2.0 - 0.1  # default 0.998 averages both


def test_adascale_scale_one_is_plain_sgd(tmp_path):
  model, features, labels = tiny_models.generated_data("mlp", 32)
  ada = trainer.train(model, features, labels, tmp_path / "ada", 8, 5,
                      optimizer="sgd", lr_scaling="adascale")
  plain = trainer.train(model, features, labels, tmp_path / "plain", 8, 5,
                        optimizer="sgd")
  assert ada.get_variable_value("adascale/gain") == 1.0
  assert ada.get_variable_value("adascale/progress") == 5.0
  a, b = _model_vars(ada), _model_vars(plain)
  assert max_difference(a, b) < 1e-6


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam"])
def test_accumulation_matches_one_large_batch(optimizer, tmp_path):
  model, features, labels = tiny_models.generated_data("mlp", 64)
  accumulated = trainer.train(model, features, labels, tmp_path / "k4", 16,
                              20, optimizer=optimizer, accumulation_steps=4,
                              learning_rate=0.05)
  large = trainer.train(model, features, labels, tmp_path / "k1", 16, 20,
                        optimizer=optimizer, learning_rate=0.05)
  a, b = _model_vars(accumulated), _model_vars(large)
  assert max_difference(a, b) <= 1e-5
  assert accumulated.get_variable_value("global_step") == 20
  assert accumulated.get_variable_value(
      "accumulation/micro_batches") == 80


def test_accumulation_of_sparse_gradients(tmp_path):
  model, features, labels = tiny_models.generated_data("embedding", 64)
  accumulated = trainer.train(model, features, labels, tmp_path / "k4", 16,
                              20, optimizer="momentum", accumulation_steps=4)
  large = trainer.train(model, features, labels, tmp_path / "k1", 16, 20,
                        optimizer="momentum")
  a, b = _model_vars(accumulated), _model_vars(large)
  assert max_difference(a, b) <= 1e-5


def test_progress_and_gain_bounds_and_stop_at_tau(tmp_path):
  model, features, labels = tiny_models.generated_data("mlp", 256)
  target, scale = 40, 4
  recorder = trainer.GainRecorder()
  estimator = trainer.train(model, features, labels, tmp_path / "t", 32,
                            1000, hooks=[recorder], optimizer="momentum",
                            accumulation_steps=scale, lr_scaling="adascale",
                            learning_rate=0.05, scale_invariant_steps=target)
  updates = estimator.get_variable_value("global_step")
  tau = estimator.get_variable_value("adascale/progress")
  assert math.ceil(target / scale) <= updates <= target
  assert tau >= target and tau - target < scale
  gain = estimator.get_variable_value("adascale/gain")
  assert 1.0 <= gain <= scale
  # tau is the sum of the updates' gains, and training stopped at the first
  # update that brought it to the target.
  gains = recorder.gains
  assert len(gains) == updates and gains[-1] == gain
  assert all(1.0 <= g <= scale for g in gains)
  assert tau == pytest.approx(sum(gains), rel=1e-6)
  assert sum(gains[:-1]) < target


def test_restore_continues_gain_and_progress(tmp_path):
  # One batch is the whole data set, so a restarted input pipeline feeds the
  # resumed run exactly what the uninterrupted run saw.
  model, features, labels = tiny_models.generated_data("mlp", 16)
  kwargs = dict(optimizer="momentum", accumulation_steps=4,
                lr_scaling="adascale")
  whole = trainer.train(model, features, labels, tmp_path / "whole", 16, 10,
                        **kwargs)
  trainer.train(model, features, labels, tmp_path / "split", 16, 4, **kwargs)
  resumed = trainer.train(model, features, labels, tmp_path / "split", 16,
                          10, **kwargs)
  assert resumed.get_variable_value("global_step") == 10
  for name in ("gain", "progress", "grad_var_avg", "grad_sqr_avg"):
    assert resumed.get_variable_value(f"adascale/{name}") == pytest.approx(
        whole.get_variable_value(f"adascale/{name}"), rel=1e-5), name
  a, b = _model_vars(resumed), _model_vars(whole)
  assert max_difference(a, b) <= 1e-5


def test_nonfinite_gradients_leave_state_unchanged(tmp_path):
  x = np.array([[1, 0], [np.inf, 1]], np.float32)
  estimator = trainer.train(tiny_models.SumLinear(2, True),
                            {"x": x, "id": np.arange(2)}, np.zeros(2),
                            tmp_path / "nan", 2, 1, optimizer="sgd",
                            accumulation_steps=2, lr_scaling="adascale")
  assert estimator.get_variable_value("adascale/progress") == 0.0
  assert estimator.get_variable_value("adascale/nonfinite_updates") == 1
  assert estimator.get_variable_value("adascale/ema_weight") == 0.0
  assert np.all(np.isfinite(estimator.get_variable_value(
      "model/linear/kernel")))


def test_scaling_rules():
  schedule = es.TrainingConfig(learning_rate=0.1).base_learning_rate
  with tf.compat.v1.Session() as sess:
    assert sess.run(scaling.scaled_learning_rate("sqrt", schedule, 0, 4)) == (
        pytest.approx(0.2))
    assert sess.run(scaling.scaled_learning_rate("linear", schedule, 5, 4)) == (
        pytest.approx(0.4))
    ramp = [sess.run(scaling.scaled_learning_rate("linear", schedule, s, 4, 10))
            for s in (0, 5, 10, 20)]
  assert ramp == pytest.approx([0.1, 0.25, 0.4, 0.4])


def test_a_rule_past_the_studied_s_is_named_once(monkeypatch):
  lines = []
  monkeypatch.setattr(scaling.logging, "warning",
                      lambda fmt, *args: lines.append(fmt % args))
  scaling._warn_once.cache_clear()  # pylint: disable=protected-access
  for _ in range(2):
    scaling.warn_beyond_studied("linear", 64.0)
  scaling.warn_beyond_studied("linear", scaling.HELD_UP_TO["linear"])
  scaling.warn_beyond_studied("identity", 1024.0)  # adapts nothing
  assert lines == [
      f"lr_scaling='linear' at S = 64: the click studies kept the S = 1 AUC "
      f"with it under Adagrad only up to S = "
      f"{scaling.HELD_UP_TO['linear']} "
      f"({scaling.STUDIES})"]


def test_schedules():
  with tf.compat.v1.Session() as sess:
    piecewise = es.TrainingConfig(
        learning_rate=1.0, lr_schedule="piecewise", lr_boundaries=(10, 20),
        lr_decay_rate=0.1).base_learning_rate
    assert [sess.run(piecewise(s)) for s in (0, 10, 25)] == pytest.approx(
        [1.0, 0.1, 0.01])
    cosine = es.TrainingConfig(learning_rate=1.0, lr_schedule="cosine",
                               lr_decay_steps=10).base_learning_rate
    assert [sess.run(cosine(s)) for s in (0, 5, 10, 50)] == pytest.approx(
        [1.0, 0.5, 0.0, 0.0], abs=1e-6)
    polynomial = es.TrainingConfig(
        learning_rate=1.0, lr_schedule="polynomial", lr_decay_steps=10,
        lr_power=2.0).base_learning_rate
    assert [sess.run(polynomial(s)) for s in (0, 5, 10)] == pytest.approx(
        [1.0, 0.25, 0.0], abs=1e-6)
    warm = es.TrainingConfig(learning_rate=1.0,
                             warmup_steps=4).base_learning_rate
    assert [sess.run(warm(s)) for s in (0, 3, 9)] == pytest.approx(
        [0.25, 1.0, 1.0])


@pytest.mark.parametrize("kwargs,message", [
    (dict(accumulation_steps=0), "^accumulation_steps=0 must be"),
    (dict(batch_scale=0.5), "^batch_scale=0.5 must be >= 1"),
    (dict(lr_scaling="cubic"), "^lr_scaling='cubic' is unknown"),
    (dict(optimizer="rmsprop"), "^optimizer='rmsprop' is unknown"),
    (dict(lr_scaling="adascale", adascale_smoothing=1.0),
     r"^adascale_smoothing=1.0 must be in \[0, 1\)"),
    (dict(adascale_smoothing=0.5), "^adascale_smoothing=0.5 needs"),
    (dict(learning_rate=0.0), "^learning_rate=0.0 must be > 0"),
    (dict(lr_schedule="step"), "^lr_schedule='step' is unknown"),
    (dict(lr_schedule="cosine"),
     "^lr_schedule='cosine' needs lr_decay_steps >= 1, got lr_decay_steps=0"),
    (dict(lr_boundaries=(20, 10)), r"^lr_boundaries=\[20, 10\] must be "),
    (dict(warmup_steps=-1), "^warmup_steps=-1 must be >= 0"),
])
def test_bad_training_config(kwargs, message):
  with pytest.raises(es.errors.ConfigError, match=message):
    es.TrainingConfig(**kwargs)


def test_adascale_scale_without_samples_is_refused(tmp_path):
  with pytest.raises(ValueError, match="at least 2 gradient samples"):
    es.make_estimator(tiny_models.SumLinear(2, True),
                      model_dir=str(tmp_path),
                      training_config=es.TrainingConfig(lr_scaling="adascale",
                                                        batch_scale=4))


def test_adamw_decay_is_decoupled_from_the_gradient():
  with tf.Graph().as_default():
    var = tf.compat.v1.get_variable("w", initializer=[1.0, -2.0],
                                    use_resource=True)
    opt = optimizers.make_optimizer("adamw", 0.1, weight_decay=0.5)
    step = opt.apply_gradients([(tf.constant([0.0, 0.0]), var)])
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      sess.run(step)
      # Zero gradient: Adam moves nothing; only w -= lr * wd * w remains.
      assert sess.run(var) == pytest.approx([0.95, -1.9])


def test_one_horovod_rank_exchanges_nothing():
  """Its allreduce would only wait for Horovod's next cycle each update."""

  class OneRank:  # what HorovodReducer asks of Horovod when it is one rank
    Compression = type("Compression", (), {"none": None, "fp16": None})

    @staticmethod
    def size():
      return 1

  with tf.Graph().as_default():
    grad, total = tf.constant([1.0, 2.0]), tf.constant(3.0)
    stop_flag = stop.StopFlag()
    means, sums = reducer.HorovodReducer(OneRank, "fp16", stop_flag).all_mean(
        [grad, None], [total])
    assert means[0] is grad and means[1] is None and sums == [total]
    # The stop flag's total is the flag itself: nothing else to agree with.
    flag, flag_total = stop_flag.tensors(agree=None)
    assert flag_total is flag
    assert not [op for op in tf.compat.v1.get_default_graph().get_operations()
                if op.type.startswith("Horovod")]


def test_fp16_exchange_without_float32_sums_is_one_grouped_allreduce():
  """Under compression the stop flag rides in float16 with the gradients:
  a float32 flag alone would cost a second negotiation every update."""

  groups = []

  class TwoRanks:  # sums as two ranks holding the same tensors would
    Compression = hvd.Compression
    Sum = hvd.Sum

    @staticmethod
    def size():
      return 2

    @staticmethod
    def grouped_allreduce(tensors, op):
      assert op == hvd.Sum
      groups.append([t.dtype for t in tensors])
      return [2 * t for t in tensors]

  with tf.Graph().as_default():
    grad = tf.constant([1.0, 2.0])
    stop_flag = stop.StopFlag()
    means, sums = reducer.HorovodReducer(TwoRanks, "fp16", stop_flag).all_mean(
        [grad], [])
    assert groups == [[tf.float16, tf.float16]] and sums == []
    flag, total = stop_flag.tensors(agree=None)
    assert means[0].dtype == total.dtype == tf.float32
    with tf.compat.v1.Session() as sess:
      got_mean, got_total = sess.run([means[0], total], {flag: 1.0})
    assert list(got_mean) == [1.0, 2.0] and got_total == 2.0
    # AdaScale's float32 sums keep their precision in a group of their own.
    groups.clear()
    reducer.HorovodReducer(TwoRanks, "fp16", stop.StopFlag()).all_mean(
        [grad], [tf.constant(3.0)])
    assert groups == [[tf.float16, tf.float16], [tf.float32]]

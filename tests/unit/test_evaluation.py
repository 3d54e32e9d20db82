"""train_and_evaluate in one process: its checks, cadence and early stopping."""
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale import evaluation
from tests.workers.tiny_models import generated_data


def _eval(step, loss):
  return {"global_step": step, "loss": loss}


def test_stop_if_no_decrease_counts_steps_since_the_best():
  hook = es.stop_if_no_decrease("loss", 20)
  assert not hook.should_stop(_eval(10, 1.0))
  assert not hook.should_stop(_eval(20, 1.0))   # equal is no decrease
  assert not hook.should_stop(_eval(30, 0.5))   # new best at 30
  assert not hook.should_stop(_eval(50, 0.6))   # 20 steps since: not more
  assert hook.should_stop(_eval(60, 0.6))


def test_stop_if_no_increase_and_evaluation_patience():
  hook = es.EarlyStoppingHook("accuracy", higher_is_better=True,
                              max_evaluations_without_improvement=2,
                              min_steps=40)
  results = [(10, 0.5), (20, 0.4), (30, 0.4), (40, 0.3)]
  stops = [hook.should_stop({"global_step": s, "accuracy": a})
           for s, a in results]
  assert stops == [False, False, False, True]


def test_early_stopping_names_the_valid_metrics():
  with pytest.raises(es.errors.ConfigError, match="valid: global_step, loss"):
    es.stop_if_no_decrease("los", 10).should_stop(_eval(10, 1.0))
  with pytest.raises(es.errors.UsageError, match="exactly one of"):
    es.EarlyStoppingHook("loss")


def test_cadence_every_n_steps_and_by_checkpoints():
  every = evaluation._Cadence(every_n_steps=25, throttle_secs=600,
                              checkpoint_steps=10)
  assert [every.next_stop(s, 60) for s in (0, 25, 50)] == [25, 50, 60]
  assert every.due(25, 60)
  throttled = evaluation._Cadence(None, throttle_secs=600, checkpoint_steps=10)
  assert throttled.next_stop(3, 100) == 10
  assert not throttled.due(10, 100) and throttled.due(100, 100)
  throttled.trained(updates=10, seconds=1.0)  # 10 updates/s: 600 s = 6000
  assert throttled.next_stop(10, 100000) > 5000


def test_specs_are_checked_before_training(tmp_path):
  model, features, labels = generated_data("mlp", 32)
  estimator = es.make_estimator(model, model_dir=str(tmp_path))
  input_fn = es.inputs.from_arrays(features, labels, 8)
  eval_spec = tf.estimator.EvalSpec(input_fn)
  with pytest.raises(es.errors.ConfigError, match="max_steps is required"):
    es.train_and_evaluate(estimator, tf.estimator.TrainSpec(input_fn),
                          eval_spec)
  with pytest.raises(es.errors.UsageError, match="es.make_estimator"):
    es.train_and_evaluate(estimator.tf_estimator,
                          tf.estimator.TrainSpec(input_fn, 10), eval_spec)
  with pytest.raises(es.errors.ConfigError, match="eval_every_n_steps"):
    es.train_and_evaluate(estimator, tf.estimator.TrainSpec(input_fn, 10),
                          eval_spec, eval_every_n_steps=0)
  assert not tf.io.gfile.exists(str(tmp_path / "checkpoint"))


def test_predicting_on_ranks_is_refused_where_there_are_none(tmp_path):
  model, features, labels = generated_data("mlp", 32)
  estimator = es.make_estimator(model, model_dir=str(tmp_path))
  with pytest.raises(es.errors.UsageError,
                     match="on_ranks=True.*distribution='none' has no ranks"):
    estimator.predict(es.inputs.from_arrays(features, labels, 8,
                                            training=False), on_ranks=True)


def test_restart_at_max_steps_evaluates_once_without_training(tmp_path):
  model, features, labels = generated_data("mlp", 32)
  estimator = es.make_estimator(model, model_dir=str(tmp_path))
  train = tf.estimator.TrainSpec(es.inputs.from_arrays(features, labels, 8),
                                 max_steps=5)
  evaluate = tf.estimator.EvalSpec(
      es.inputs.from_arrays(features, labels, 8, training=False),
      throttle_secs=0)
  es.train_and_evaluate(estimator, train, evaluate, eval_every_n_steps=5)
  result, _ = es.train_and_evaluate(estimator, train, evaluate)
  assert result["global_step"] == 5 and len(estimator.evaluations) == 1


def test_a_hooks_stop_ends_training_with_a_final_evaluation(tmp_path):
  model, features, labels = generated_data("mlp", 32)
  estimator = es.make_estimator(model, model_dir=str(tmp_path))
  stop_at_7 = tf.estimator.StopAtStepHook(last_step=7)
  train = tf.estimator.TrainSpec(es.inputs.from_arrays(features, labels, 8),
                                 max_steps=1000, hooks=[stop_at_7])
  evaluate = tf.estimator.EvalSpec(
      es.inputs.from_arrays(features, labels, 8, training=False))
  result, _ = es.train_and_evaluate(estimator, train, evaluate,
                                    eval_every_n_steps=500)
  assert result["global_step"] == 7 and len(estimator.evaluations) == 1

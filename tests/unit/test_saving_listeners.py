"""A user's `CheckpointSaverListener`s run at each checkpoint save, as
tf.estimator's do: through `train(saving_listeners=...)` and through
`train_and_evaluate`'s TrainSpec (Horovod's ranks: test_multiprocess)."""
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale import errors
from tests.workers.tiny_models import generated_data


class _Saves(tf.estimator.CheckpointSaverListener):

  def __init__(self):
    self.steps, self.begun, self.ended = [], 0, 0

  def begin(self):
    self.begun += 1

  def after_save(self, session, global_step_value):
    self.steps.append(global_step_value)

  def end(self, session, global_step_value):
    self.ended += 1


def _estimator(tmp_path, save_checkpoints_steps):
  model, features, labels = generated_data("mlp", 32)
  estimator = es.make_estimator(model, model_dir=str(tmp_path / "model"),
                                save_checkpoints_steps=save_checkpoints_steps)
  return estimator, features, labels


def test_train_calls_the_listeners_at_each_save(tmp_path):
  estimator, features, labels = _estimator(tmp_path, 3)
  saves = _Saves()
  estimator.train(es.inputs.from_arrays(features, labels, 8),
                  max_steps=6, saving_listeners=[saves])
  assert saves.steps == [0, 3, 6]
  assert (saves.begun, saves.ended) == (1, 1)


def test_listeners_without_saves_are_refused(tmp_path):
  estimator, features, labels = _estimator(tmp_path, None)
  with pytest.raises(errors.ConfigError, match="saving_listeners: .* saves "
                     "none; give save_checkpoints_steps"):
    estimator.train(es.inputs.from_arrays(features, labels, 8),
                    max_steps=2, saving_listeners=[_Saves()])


def test_train_and_evaluate_passes_the_train_specs_listeners(tmp_path):
  estimator, features, labels = _estimator(tmp_path, 2)
  saves = _Saves()
  es.train_and_evaluate(
      estimator,
      tf.estimator.TrainSpec(es.inputs.from_arrays(features, labels, 8),
                             max_steps=4, saving_listeners=[saves]),
      tf.estimator.EvalSpec(es.inputs.from_arrays(features, labels, 8,
                                                  training=False), steps=1),
      eval_every_n_steps=2)
  # A round of training ends at each evaluation: 0-2 then 2-4.
  assert saves.steps == [0, 2, 2, 4]
  assert (saves.begun, saves.ended) == (2, 2)

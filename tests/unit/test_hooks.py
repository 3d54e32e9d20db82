"""LastStepHook tells an input that ran out from a stop a hook asked for."""
import tensorflow as tf

from estimator_scale import hooks as hooks_lib
from tests.helpers import trainer
from tests.workers import tiny_models


class _StopAt(tf.compat.v1.train.SessionRunHook):
  """Asks to stop after its `step`-th update (like a model's hook).

  It counts its own runs: a global_step fetched in the same run as the
  update may be read before or after the increment (the two ops are not
  ordered), so a stop at a fetched step would land on step 3 or 4 by
  chance.
  """

  def __init__(self, step):
    self._stop_at = step
    self._runs = 0

  def after_run(self, run_context, run_values):
    self._runs += 1
    if self._runs >= self._stop_at:
      run_context.request_stop()


def _last_step(tmp_path, name, examples, hooks):
  """Trains over one pass of `examples` with `hooks`; returns LastStepHook.

  tf.estimator's own train, so that LastStepHook sees only these hooks.
  """
  model, features, labels = tiny_models.generated_data("mlp", examples)
  estimator = trainer.make_estimator(model, tmp_path / name)
  last = hooks_lib.LastStepHook()
  estimator.tf_estimator.train(
      trainer.array_input(features, labels, 8, one_pass=True),
      hooks=[last] + hooks, max_steps=100)
  return last


def test_input_that_runs_out(tmp_path):
  last = _last_step(tmp_path, "ends", 24, [])
  assert (last.last_step, last.input_ended) == (3, True)


def test_stop_requested_by_a_later_hook(tmp_path):
  last = _last_step(tmp_path, "stops", 80, [_StopAt(4)])
  assert (last.last_step, last.input_ended) == (4, False)

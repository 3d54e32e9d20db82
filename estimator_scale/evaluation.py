"""`train_and_evaluate` from the usual TrainSpec/EvalSpec, on every backend.

Horovod ranks evaluating at different steps deadlock, so training runs in
segments whose end the chief picks, and metrics are shared.
"""
import os
import time

from absl import logging
import tensorflow as tf

from estimator_scale import embeddings
from estimator_scale import errors
from estimator_scale import estimator as estimator_lib
from estimator_scale.backends import coordinator as coordinator_lib


class EarlyStoppingHook(tf.compat.v1.train.SessionRunHook):
  """Stops `train_and_evaluate` when an eval metric stops improving.

  Put it in `TrainSpec.hooks`. TF's own hook reads event files per worker,
  so workers stop apart and deadlock.

  Args:
    metric_name: a key of the evaluation's metrics.
    higher_is_better: whether larger values are improvements.
    max_steps_without_improvement: stop once the best evaluation is more
      than this many updates older than the latest.
    max_evaluations_without_improvement: or after this many in a row.
    min_steps: never stop before this update.
  """

  def __init__(self, metric_name, higher_is_better=False,
               max_steps_without_improvement=None,
               max_evaluations_without_improvement=None, min_steps=0):
    limits = (max_steps_without_improvement,
              max_evaluations_without_improvement)
    if sum(limit is not None for limit in limits) != 1:
      raise errors.UsageError(
          "EarlyStoppingHook needs exactly one of max_steps_without_"
          "improvement and max_evaluations_without_improvement")
    if min(limit for limit in limits if limit is not None) < 1:
      raise errors.ConfigError(
          f"EarlyStoppingHook: the limit must be >= 1, got {limits}")
    self.metric_name = metric_name
    self._sign = 1.0 if higher_is_better else -1.0
    self._max_steps = max_steps_without_improvement
    self._max_evaluations = max_evaluations_without_improvement
    self._min_steps = min_steps
    self._best = None  # (signed value, step)
    self._since_best = 0

  def should_stop(self, eval_result):
    """Records one evaluation; whether training should end at its step."""
    if self.metric_name not in eval_result:
      raise errors.ConfigError(
          f"EarlyStoppingHook: metric_name={self.metric_name!r} is not an "
          f"eval metric; valid: {', '.join(sorted(eval_result))}")
    value = self._sign * float(eval_result[self.metric_name])
    step = int(eval_result["global_step"])
    if self._best is None or value > self._best[0]:
      self._best, self._since_best = (value, step), 0
    else:
      self._since_best += 1
    if step < self._min_steps:
      return False
    if self._max_steps is not None:
      return step - self._best[1] > self._max_steps
    return self._since_best >= self._max_evaluations


def stop_if_no_decrease(metric_name, max_steps_without_decrease, min_steps=0):
  """An `EarlyStoppingHook` for a metric that should fall (a loss)."""
  return EarlyStoppingHook(metric_name, False, max_steps_without_decrease,
                           min_steps=min_steps)


def stop_if_no_increase(metric_name, max_steps_without_increase, min_steps=0):
  """An `EarlyStoppingHook` for a metric that should rise (an accuracy)."""
  return EarlyStoppingHook(metric_name, True, max_steps_without_increase,
                           min_steps=min_steps)


class _Cadence:
  """Where the chief ends each segment and whether it evaluates; segments are
  sized from the speed so a long throttle does not restart every checkpoint."""

  def __init__(self, every_n_steps, throttle_secs, checkpoint_steps):
    self._every = every_n_steps
    self._throttle = throttle_secs
    self._checkpoint = checkpoint_steps
    self._last_eval = time.time()
    self._speed = None  # updates per second

  def next_stop(self, step, max_steps):
    """The step the next segment trains to."""
    if self._every:
      return min(max_steps, (step // self._every + 1) * self._every)
    chunks = 1
    if self._speed:
      wait = self._throttle - (time.time() - self._last_eval)
      chunks = max(1, int(self._speed * wait) // self._checkpoint + 1)
    return min(max_steps, (step // self._checkpoint + chunks) *
               self._checkpoint)

  def trained(self, updates, seconds):
    if updates > 0 and seconds > 0:
      self._speed = updates / seconds

  def due(self, step, max_steps):
    """Whether to evaluate at `step`, a segment's end."""
    if self._every or step >= max_steps:
      return True
    return time.time() - self._last_eval >= self._throttle

  def evaluated(self):
    self._last_eval = time.time()


def _check_specs(estimator, train_spec, eval_spec, eval_every_n_steps):
  if not isinstance(estimator, estimator_lib.Estimator):
    raise errors.UsageError(
        "train_and_evaluate: estimator must come from es.make_estimator, got "
        f"{type(estimator).__name__}")
  if not isinstance(train_spec, tf.estimator.TrainSpec):
    raise errors.UsageError("train_and_evaluate: train_spec must be a "
                            f"tf.estimator.TrainSpec, got {train_spec!r}")
  if not isinstance(eval_spec, tf.estimator.EvalSpec):
    raise errors.UsageError("train_and_evaluate: eval_spec must be a "
                            f"tf.estimator.EvalSpec, got {eval_spec!r}")
  if train_spec.max_steps is None:
    raise errors.ConfigError(
        "train_and_evaluate: train_spec.max_steps is required: every worker "
        "must run the same number of updates")
  if eval_every_n_steps is not None and eval_every_n_steps < 1:
    raise errors.ConfigError("train_and_evaluate: eval_every_n_steps must be "
                             f">= 1, got {eval_every_n_steps}")


def _chief_decides(estimator):
  """decide(fn) -> the chief's fn() on every worker; without a broadcast
  (TF_CONFIG) each calls fn, which must then depend on steps alone."""
  coordinator = estimator.coordinator
  if not coordinator.can_broadcast:
    return lambda fn: fn()
  return lambda fn: coordinator.broadcast(
      fn() if estimator.topology.is_chief else None)


def _export(estimator, eval_spec, eval_result, is_final):
  """Runs the EvalSpec's exporters on the chief; {name: export result}."""
  results = {}
  if not estimator.topology.is_chief:
    return results
  checkpoint = estimator.latest_checkpoint()
  for exporter in eval_spec.exporters:
    path = os.path.join(estimator.model_dir, "export", exporter.name)
    with embeddings.exporting(checkpoint):
      results[exporter.name] = exporter.export(
          estimator.tf_estimator, path, checkpoint, eval_result, is_final)
  return results


def train_and_evaluate(estimator, train_spec, eval_spec,
                       eval_every_n_steps=None):
  """Trains with periodic evaluation, exports and early stopping.

  `start_delay_secs` is unused. TF_CONFIG clusters cannot share the chief's
  clock, so they evaluate every checkpoint (or `eval_every_n_steps`),
  ignoring `throttle_secs`. A final evaluation and export run at the end.

  Args:
    estimator: an `Estimator` from `make_estimator`.
    train_spec: `tf.estimator.TrainSpec` with max_steps.
    eval_spec: `tf.estimator.EvalSpec`.
    eval_every_n_steps: evaluate every this many updates instead.

  Returns:
    (the last evaluation's metrics, {exporter name: its last export}).

  Raises:
    UsageError: an estimator or spec of another kind, naming it.
    ConfigError: a spec or argument this cannot run, naming it.
  """
  _check_specs(estimator, train_spec, eval_spec, eval_every_n_steps)
  coordinator = estimator.coordinator
  hooks = list(train_spec.hooks)
  stoppers = [h for h in hooks if isinstance(h, EarlyStoppingHook)]
  max_steps = train_spec.max_steps
  agree = _chief_decides(estimator)
  checkpoint_steps = agree(
      lambda: estimator.config.save_checkpoints_steps or 100)
  cadence = _Cadence(eval_every_n_steps,
                     eval_spec.throttle_secs if coordinator.can_broadcast
                     else 0, checkpoint_steps)
  step = agree(lambda: coordinator_lib.checkpoint_step(estimator.model_dir))
  estimator.evaluations = []
  eval_result, exports = None, {}
  while True:
    target = agree(lambda: cadence.next_stop(step, max_steps))
    start = time.time()
    estimator.train(train_spec.input_fn, hooks=hooks, max_steps=target,
                    saving_listeners=train_spec.saving_listeners)
    trained = estimator.last_train
    cadence.trained(trained.step - step, time.time() - start)
    step = trained.step
    if trained.reason is coordinator_lib.StopReason.SIGNAL:
      break
    # A hook's stop (AdaScale's tau, a user's hook) or an input that ran out
    # ends training for good; every worker sees it at the same step, as the
    # stop is agreed in-graph.
    hook_stopped = trained.reason is not coordinator_lib.StopReason.TARGET
    if not (hook_stopped or agree(lambda: cadence.due(step, max_steps))):
      continue
    eval_result = estimator.evaluate(
        eval_spec.input_fn, steps=eval_spec.steps, hooks=eval_spec.hooks,
        name=eval_spec.name)
    cadence.evaluated()
    estimator.evaluations.append(eval_result)
    logging.info("evaluation at step %d: %s", step, _format(eval_result))
    stop = [s.metric_name for s in stoppers if s.should_stop(eval_result)]
    if stop:
      logging.info("early stopping at step %d: no improvement of %s", step,
                   ", ".join(stop))
    done = bool(stop) or hook_stopped or step >= max_steps
    exports = _export(estimator, eval_spec, eval_result, done) or exports
    if done:
      break
  return eval_result, exports


def _format(metrics):
  return ", ".join(f"{k} = {float(v):.4g}" for k, v in sorted(metrics.items()))

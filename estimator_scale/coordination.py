"""How the workers of a backend agree on when to train, evaluate and export.

`Estimator.train/evaluate/export_saved_model` delegate here, so a user's
call behaves the same on one process, N tf.distribute workers or N Horovod
ranks: all start from the same step, stop at the same step, see the same
metrics, and only the chief writes.
"""
import os
import shutil
import tempfile
import time

from absl import logging
import tensorflow as tf

from estimator_scale import errors
from estimator_scale import hooks as hooks_lib


def checkpoint_step(model_dir):
  """The global step of the latest checkpoint in model_dir (0 if none)."""
  path = tf.train.latest_checkpoint(model_dir) if model_dir else None
  if not path:
    return 0
  return int(tf.train.load_variable(path, "global_step"))


def _target_step(start, steps, max_steps, backend):
  if steps is None and max_steps is None:
    raise errors.ConfigError(
        f"training with distribution={backend!r} needs steps or max_steps: "
        "every worker must run the same number of updates")
  for name, value in (("steps", steps), ("max_steps", max_steps)):
    if value is not None and value <= 0:
      raise errors.ConfigError(f"{name} must be > 0, got {value}")
  return max_steps if max_steps is not None else start + steps


def _ended_at(last, estimator):
  """The step a train() call ended at, also when Estimator skipped it.

  Estimator returns without a session (no hook runs) when the checkpoint is
  at max_steps already, e.g. written by another worker meanwhile.
  """
  if last.last_step is None:
    return checkpoint_step(estimator.model_dir)
  return last.last_step


class LocalCoordinator:
  """One process (with any number of replicas): Estimator as it is."""

  can_broadcast = True
  """Whether `broadcast` hands the chief's value to every worker."""

  def __init__(self, topology):
    self.topology = topology
    self.stopped_by_signal = False

  def broadcast(self, value):
    """The chief's `value`, on every worker (here: the only one)."""
    return value

  def train(self, estimator, input_fn, hooks, steps, max_steps):
    """Runs training; returns the step it ended at."""
    for name, value in (("steps", steps), ("max_steps", max_steps)):
      if value is not None and value <= 0:
        raise errors.ConfigError(f"{name} must be > 0, got {value}")
    last = hooks_lib.LastStepHook()
    estimator.train(input_fn, hooks=hooks + [last], steps=steps,
                    max_steps=max_steps)
    return _ended_at(last, estimator)

  def evaluate(self, estimator, input_fn, **kwargs):
    return estimator.evaluate(input_fn, **kwargs)

  def export(self, estimator, export_dir_base, receiver_fn, **kwargs):
    return estimator.export_saved_model(export_dir_base, receiver_fn, **kwargs)


class HorovodCoordinator(LocalCoordinator):
  """Horovod ranks: rank 0 decides, all ranks follow.

  The start step is rank 0's checkpoint step (broadcast), so a restart agrees
  even when only rank 0 can see the checkpoint; a SIGTERM to any rank stops
  all of them after the same update; a rank whose input ends early fails
  loudly instead of leaving the others blocked in an allreduce.
  """

  def __init__(self, topology, hvd):
    super().__init__(topology)
    self._hvd = hvd

  def broadcast(self, value):
    """See base class."""
    return self._hvd.broadcast_object(value, root_rank=0)

  def _agree_stop(self, flag):
    return self._hvd.allreduce(flag, op=self._hvd.Sum, name="stop_agreement")

  def train(self, estimator, input_fn, hooks, steps, max_steps):
    """See base class."""
    start = self.broadcast(checkpoint_step(estimator.model_dir)
                            if self.topology.is_chief else None)
    target = _target_step(start, steps, max_steps, "horovod")
    if start >= target:
      logging.info("checkpoint is at step %d >= %d: nothing to train", start,
                   target)
      return start
    stop = hooks_lib.SignalStopHook(self._agree_stop)
    last = hooks_lib.LastStepHook()
    estimator.train(input_fn, hooks=hooks + [stop, last], max_steps=target)
    self.stopped_by_signal = stop.stopped
    if last.last_step < target and last.input_ended:
      raise RuntimeError(
          f"rank {self.topology.worker_index}: training input ended at step "
          f"{last.last_step}, before step {target}; every rank must run the "
          "same number of updates, so the training input_fn must repeat")
    self.broadcast(None)  # rank 0's final checkpoint is written past here
    return last.last_step

  def evaluate(self, estimator, input_fn, **kwargs):
    """Rank 0 evaluates with no collectives; every rank gets its metrics."""
    result = None
    if self.topology.is_chief:
      result = estimator.evaluate(input_fn, **kwargs)
    return self.broadcast(result)

  def export(self, estimator, export_dir_base, receiver_fn, **kwargs):
    """Rank 0 exports; every rank gets the path."""
    path = None
    if self.topology.is_chief:
      path = estimator.export_saved_model(export_dir_base, receiver_fn,
                                          **kwargs)
    return self.broadcast(path)


class ClusterCoordinator(LocalCoordinator):
  """TF_CONFIG workers (multi_worker_mirrored, parameter_server).

  TF 2.15's Estimator trains these only through train_and_evaluate, which
  this wraps; workers share model_dir, where only the chief writes. Outside
  a training session they have no channel, so `broadcast` cannot share the
  chief's value: decisions must follow from steps alone.
  """

  can_broadcast = False

  def __init__(self, topology):
    super().__init__(topology)
    self._servers_started = False
    self._target = 0

  def train(self, estimator, input_fn, hooks, steps, max_steps):
    """See base class."""
    start = checkpoint_step(estimator.model_dir)
    target = _target_step(start, steps, max_steps, self.topology.backend)
    if start >= target:
      logging.info("checkpoint is at step %d >= %d: nothing to train", start,
                   target)
      return start
    last = hooks_lib.LastStepHook()
    if self._servers_started and self.topology.backend == "parameter_server":
      # train_and_evaluate would start this task's gRPC server a second time.
      estimator.train(input_fn, hooks=hooks + [last], max_steps=target)
    else:
      tf.estimator.train_and_evaluate(
          estimator,
          tf.estimator.TrainSpec(input_fn, max_steps=target,
                                 hooks=hooks + [last]),
          # Without an evaluator task the EvalSpec is not used.
          tf.estimator.EvalSpec(input_fn, steps=1))
    self._servers_started = True
    self._target = target
    return _ended_at(last, estimator)

  def _wait_for_checkpoint(self, model_dir, timeout=300):
    target = self._target
    deadline = time.time() + timeout
    while checkpoint_step(model_dir) < target:
      if time.time() > deadline:
        raise TimeoutError(f"no checkpoint at step {target} in {model_dir} "
                           f"after {timeout}s; is the chief alive?")
      time.sleep(0.5)

  def evaluate(self, estimator, input_fn, **kwargs):
    """The chief evaluates in model_dir; others read its checkpoint elsewhere."""
    if self.topology.is_chief:
      return estimator.evaluate(input_fn, **kwargs)
    self._wait_for_checkpoint(estimator.model_dir)
    if kwargs.get("checkpoint_path") is None:
      kwargs["checkpoint_path"] = tf.train.latest_checkpoint(
          estimator.model_dir)
    scratch = tempfile.mkdtemp(prefix="eval-")
    try:
      # Same model_fn and params (bound in the public wrapper), own eval dir.
      twin = tf.estimator.Estimator(
          lambda features, labels, mode, config: estimator.model_fn(
              features, labels, mode, config),
          config=estimator.config.replace(model_dir=scratch))
      return twin.evaluate(input_fn, **kwargs)
    finally:
      shutil.rmtree(scratch, ignore_errors=True)

  def export(self, estimator, export_dir_base, receiver_fn, **kwargs):
    """Only the chief exports; others return the path it will write under."""
    if self.topology.is_chief:
      return estimator.export_saved_model(export_dir_base, receiver_fn,
                                          **kwargs)
    return os.fsencode(export_dir_base)

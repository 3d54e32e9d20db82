"""How a backend's workers agree on the start and stop step and the metrics."""
import dataclasses
import enum
import signal
import socket

from absl import logging
import tensorflow as tf

from estimator_scale import errors
from estimator_scale import hooks as hooks_lib
from estimator_scale import moments


class StopReason(enum.Enum):
  """Why a train() call ended: the callers' decisions differ for each."""
  TARGET = "reached the requested step"
  HOOK = "a hook asked to stop (AdaScale's tau, the user's own hook)"
  INPUT_ENDED = "the training input ran out"
  SIGNAL = "a worker received SIGTERM"


EXIT_STOPPED_BY_SIGNAL = 128 + signal.SIGTERM
"""How a program ends a run that a SIGTERM stopped before its end, once
the chief's checkpoint holds the step: as a process SIGTERM ended does, so
that a batch script or scheduler that reads 0 as a finished training
(`srun ... && exit 0`, a Kubernetes Job) starts it again, and the same
command resumes from that checkpoint. A SIGTERM is sent in a node's
failure too (Slurm cancels the step's other tasks), not only to end a job."""


@dataclasses.dataclass(frozen=True)
class TrainResult:
  """Where a train() call ended, and why."""
  step: int
  reason: StopReason


def checkpoint_step(model_dir):
  """The step of the latest checkpoint (0 if none) or of a later delta."""
  # Not at the top: the tables' package imports the backends.
  from estimator_scale.embeddings import deltas  # pylint: disable=g-import-not-at-top
  path = tf.train.latest_checkpoint(model_dir) if model_dir else None
  if not path:
    return 0
  follow = deltas.chain(path)
  return int(tf.train.load_variable(follow[-1][1] if follow else path,
                                    "global_step"))


def saves_checkpoints(config):
  """Whether a process with this RunConfig saves checkpoints."""
  return bool(config.save_checkpoints_steps or config.save_checkpoints_secs)


def saving_listeners(estimator, given):
  """`given` and the lab's listener (moments) where this process saves
  checkpoints, none elsewhere: TensorFlow refuses them without a saver (a
  Horovod rank other than 0), and only the chief would call them."""
  if not saves_checkpoints(estimator.config):
    return []
  return moments.save_listeners() + list(given)


def check_steps(steps, max_steps):
  for name, value in (("steps", steps), ("max_steps", max_steps)):
    if value is not None and value <= 0:
      raise errors.ConfigError(f"{name} must be > 0, got {value}")


def target_step(start, steps, max_steps, backend):
  """The step every worker trains to; multi-worker jobs need one."""
  if steps is None and max_steps is None:
    raise errors.ConfigError(
        f"training with distribution={backend.name!r} needs steps or "
        "max_steps: every worker must run the same number of updates")
  check_steps(steps, max_steps)
  return max_steps if max_steps is not None else start + steps


def result(last, estimator, target, signalled=False):
  """The TrainResult `last` (a LastStepHook) saw; else the checkpoint's step."""
  if last.last_step is None:
    return TrainResult(checkpoint_step(estimator.model_dir), StopReason.TARGET)
  if signalled:
    reason = StopReason.SIGNAL
  elif last.input_ended:
    reason = StopReason.INPUT_ENDED
  elif target is not None and last.last_step < target:
    reason = StopReason.HOOK
  else:
    reason = StopReason.TARGET
  return TrainResult(last.last_step, reason)


def nothing_to_train(start, target):
  logging.info("checkpoint is at step %d >= %d: nothing to train", start,
               target)
  return TrainResult(start, StopReason.TARGET)


def refuse_on_ranks(topology, on_ranks):
  """Raises UsageError for `predict(on_ranks=True)` outside Horovod."""
  if on_ranks:
    raise errors.UsageError(
        "predict(on_ranks=True) reads tables split over Horovod ranks, with "
        "every rank calling it; distribution="
        f"{topology.backend.name!r} has no ranks: leave on_ranks=False")


class Coordinator:
  """One process (with any number of replicas): Estimator as it is."""

  can_broadcast = True
  """Whether `broadcast` hands the chief's value to every worker."""

  def __init__(self, topology):
    self.topology = topology

  def broadcast(self, value):
    """The chief's `value`, on every worker (here: the only one)."""
    return value

  def worker_labels(self):
    """Each worker's "rank 1 (host-b)" label; every worker must call it."""
    return [f"worker 0 ({socket.gethostname()})"]

  def train(self, estimator, input_fn, hooks, steps, max_steps,
            listeners=()):
    """Runs training; returns its `TrainResult`."""
    check_steps(steps, max_steps)
    target = max_steps
    start = checkpoint_step(estimator.model_dir)
    if target is None and steps is not None:
      target = start + steps
    elif target is not None and start >= target:
      # Estimator reads the full checkpoint's step, not its deltas'.
      return nothing_to_train(start, target)
    last = hooks_lib.LastStepHook()
    estimator.train(input_fn, hooks=hooks + [last], steps=steps,
                    max_steps=max_steps,
                    saving_listeners=saving_listeners(estimator, listeners))
    return result(last, estimator, target)

  def evaluate(self, estimator, input_fn, **kwargs):
    return estimator.evaluate(input_fn, **kwargs)

  def predict(self, estimator, input_fn, on_ranks=False, **kwargs):
    refuse_on_ranks(self.topology, on_ranks)
    return estimator.predict(input_fn, **kwargs)

  def export(self, estimator, export_dir_base, receiver_fn, **kwargs):
    return estimator.export_saved_model(export_dir_base, receiver_fn, **kwargs)

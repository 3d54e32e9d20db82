"""How Horovod ranks agree: rank 0 decides, every rank follows."""
import os
import socket

import tensorflow as tf

from estimator_scale import errors
from estimator_scale import hooks as hooks_lib
from estimator_scale.backends import coordinator
from estimator_scale.backends.horovod import evaluation
from estimator_scale.backends.horovod import stop as stop_lib
from estimator_scale.embeddings import shard_checkpoints

EXCHANGES = ("HorovodAllreduce", "HorovodGroupedAllreduce", "HorovodAllgather",
             "HorovodGroupedAllgather", "HorovodReducescatter",
             "HorovodGroupedReducescatter", "HorovodAlltoall")
"""Op types through which ranks' gradients can meet (a broadcast cannot)."""


class RequireExchangeHook(tf.compat.v1.train.SessionRunHook):
  """Refuses a training graph whose ranks exchange nothing (each would train
  alone without error)."""

  def __init__(self, ranks):
    self._ranks = ranks

  def begin(self):
    graph = tf.compat.v1.get_default_graph()
    if not any(op.type in EXCHANGES for op in graph.get_operations()):
      raise errors.ConfigError(
          f"this training graph exchanges nothing between the {self._ranks} "
          "Horovod ranks, so each would train unsynchronised on its own "
          "data: give a canned estimator es.canned_optimizer(...) (a "
          "model_fn: es.build_train_op)")


class HorovodCoordinator(coordinator.Coordinator):
  """Horovod ranks: rank 0 decides, all follow; a SIGTERM to any rank stops
  all after the same update."""

  def __init__(self, topology, hvd, stop_flag):
    super().__init__(topology)
    self._hvd = hvd
    self._stop_flag = stop_flag
    self._labels = None

  def broadcast(self, value):
    """See base class."""
    return self._hvd.broadcast_object(value, root_rank=0)

  def worker_labels(self):
    """See base class: each rank's host as horovodrun's -H named it."""
    if self._labels is None:
      host = os.environ.get("HOROVOD_HOSTNAME") or socket.gethostname()
      hosts = self._hvd.allgather_object(host, name="worker_hosts")
      self._labels = [f"rank {rank} ({h})" for rank, h in enumerate(hosts)]
    return self._labels

  def _agree_stop(self, flag):
    return self._hvd.allreduce(flag, op=self._hvd.Sum, name="stop_agreement")

  def train(self, estimator, input_fn, hooks, steps, max_steps,
            listeners=()):
    """See base class."""
    start = self.broadcast(coordinator.checkpoint_step(estimator.model_dir)
                           if self.topology.is_chief else None)
    target = coordinator.target_step(start, steps, max_steps,
                                     self.topology.backend)
    if start >= target:
      return coordinator.nothing_to_train(start, target)
    stop = stop_lib.SignalStopHook(self._stop_flag, self._agree_stop)
    last = hooks_lib.LastStepHook()
    checks = ([RequireExchangeHook(self.topology.num_workers)]
              if self.topology.num_workers > 1 else [])
    estimator.train(input_fn, hooks=hooks + checks + [stop, last],
                    max_steps=target,
                    saving_listeners=coordinator.saving_listeners(
                        estimator, listeners))
    if last.last_step < target and last.input_ended:
      raise RuntimeError(
          f"rank {self.topology.worker_index}: training input ended at step "
          f"{last.last_step}, before step {target}; every rank must run the "
          "same number of updates, so the training input_fn must repeat")
    self.broadcast(None)  # rank 0's final checkpoint is written past here
    return coordinator.result(last, estimator, target, stop.stopped)

  def evaluate(self, estimator, input_fn, checkpoint_path=None, **kwargs):
    """Every rank gets the metrics; rank 0 evaluates alone
    unless the tables were saved split over the ranks (`evaluation`)."""
    path, on_ranks = self.broadcast(self._checkpoint_and_split(
        estimator, checkpoint_path))
    if on_ranks:
      return evaluation.evaluate(estimator, input_fn, self._hvd, path,
                                 **kwargs)
    result = None
    if self.topology.is_chief:
      result = estimator.evaluate(input_fn, checkpoint_path=checkpoint_path,
                                  **kwargs)
    return self.broadcast(result)

  def predict(self, estimator, input_fn, on_ranks=False, checkpoint_path=None,
              **kwargs):
    """Each rank alone, or with `on_ranks` all together (`evaluation`)."""
    if not on_ranks:
      return estimator.predict(input_fn, checkpoint_path=checkpoint_path,
                               **kwargs)
    path, split = self.broadcast(self._checkpoint_and_split(
        estimator, checkpoint_path))
    if split:
      return evaluation.predict(estimator, input_fn, self._hvd, path,
                                **kwargs)
    return estimator.predict(input_fn, checkpoint_path=path, **kwargs)

  def _checkpoint_and_split(self, estimator, checkpoint_path):
    """On the chief: (checkpoint, whether split over the ranks)."""
    if not self.topology.is_chief:
      return None
    path = checkpoint_path or estimator.latest_checkpoint()
    return path, (path is not None and self.topology.num_workers > 1 and
                  shard_checkpoints.split_over_ranks(path))

  def export(self, estimator, export_dir_base, receiver_fn, **kwargs):
    """Rank 0 exports; every rank gets the path."""
    path = None
    if self.topology.is_chief:
      path = estimator.export_saved_model(export_dir_base, receiver_fn,
                                          **kwargs)
    return self.broadcast(path)



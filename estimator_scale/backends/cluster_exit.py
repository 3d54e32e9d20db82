"""multi_worker_mirrored tasks leave in order, none seen as failed."""
import socket
import time

from absl import logging
import tensorflow as tf
from tensorflow.python.eager import context  # pylint: disable=g-direct-tensorflow-import

from estimator_scale.backends import tf_config

BARRIER = "estimator_scale_leave"
BARRIER_TIMEOUT_S = 3600
"""How long a task that is done waits for the others: as long as their
remaining work may take (the chief's evaluation and export). A peer that
fails meanwhile fails the barrier sooner (the service's heartbeat timeout),
and the launcher stops the job anyway."""

GONE_TIMEOUT_S = 60
"""How long the chief waits for the workers' processes to end after the
barrier: a process exits in seconds once it is done."""


def _answers(address, timeout=3.0):
  """Whether a process still listens at "host:port"."""
  host, _, port = address.rpartition(":")
  try:
    with socket.create_connection((host, int(port)), timeout=timeout):
      return True
  except OSError:  # refused: its process ended; else its host is gone
    return False


def wait_until_gone(addresses, timeout=GONE_TIMEOUT_S, every=0.2):
  """Waits up to `timeout` s until nothing listens at `addresses`; returns those
  still there."""
  deadline = time.monotonic() + timeout
  left = list(addresses)
  while left:
    left = [a for a in left if _answers(a)]
    if not left or time.monotonic() > deadline:
      break
    time.sleep(every)
  return left


def leave_in_order(environ=None):
  """Waits until this task may end unseen as lost; returns whether it holds the
  coordination service with the others gone (then `exit_process` now)."""
  if not context.context().coordination_service:
    return False
  cluster, task_type, index = tf_config.read_tf_config(environ)
  try:
    context.context().wait_at_barrier(BARRIER, BARRIER_TIMEOUT_S * 1000)
  except tf.errors.OpError as e:  # a peer failed: it reports itself
    logging.info("leaving without the other tasks: %s", e.message)
    return False
  chief = ("chief", 0) if "chief" in cluster else ("worker", 0)
  if (task_type, index) != chief:
    return False
  others = [address for job in ("chief", "worker")
            for i, address in enumerate(cluster.get(job, []))
            if (job, i) != chief]
  left = wait_until_gone(others)
  if left:
    logging.info("leaving while %s still answer", ", ".join(left))
  return True

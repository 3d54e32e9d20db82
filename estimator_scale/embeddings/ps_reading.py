"""Evaluation and prediction reading a parameter-server job's tables where
they live, not in one process: within `reading_on_ps` their variables go
to the ps tasks, in a resource container of their own (training's
same-named variables stay untouched), freed afterwards."""
import contextlib
import contextvars
import itertools
import os

import grpc
import tensorflow as tf

_READING = contextvars.ContextVar("estimator_scale_reading_on_ps",
                                  default=None)
_EVALUATIONS = itertools.count()


@contextlib.contextmanager
def reading_on_ps(num_ps, task_device, master, session_config):
  """Within it, graphs place their variables on the `num_ps` ps tasks (the
  rest on `task_device`, "/job:chief/task:0"); after, `master` (this task's
  server) frees them on the tasks `session_config`'s device filters name:
  this one and the ps tasks, as other workers may have exited. Yields the
  container the variables are made in."""
  # Hyphens: a lookup table refuses a container name with an underscore.
  # The task in it: processes on two hosts (or pods) may share a pid.
  task = task_device.replace("/job:", "").replace("/task:", "-")
  container = f"evaluation-{task}-{os.getpid()}-{next(_EVALUATIONS)}"
  device_fn = tf.compat.v1.train.replica_device_setter(
      ps_tasks=num_ps, worker_device=task_device, merge_devices=True)
  token = _READING.set((container, device_fn))
  try:
    yield container
  finally:
    _READING.reset(token)
    _reset(master, container, session_config.device_filters)


def predictions_on_ps(predictions, num_ps, task_device, master,
                      session_config):
  """Yields from `Estimator.predict`'s generator, built within
  `reading_on_ps` (same arguments)."""
  # A generator runs in its caller's context: set there, the reading would
  # place the caller's own graphs on the ps tasks between two items too.
  context = contextvars.copy_context()
  reading = reading_on_ps(num_ps, task_device, master, session_config)
  context.run(reading.__enter__)
  try:
    while True:
      try:
        item = context.run(next, predictions)
      except StopIteration:
        return
      yield item
  finally:
    try:
      context.run(predictions.close)  # its session, then the container
    finally:
      context.run(reading.__exit__, None, None, None)


_RESET_TIMEOUT_S = 600


def _field(number, text):
  """One length-delimited protobuf field."""
  data, key = text.encode(), (number << 3) | 2
  size, head = len(data), bytes([key])
  while size > 0x7F:
    head += bytes([size & 0x7F | 0x80])
    size >>= 7
  return head + bytes([size]) + data


def _reset(master, container, device_filters):
  """Frees `container` on the tasks `device_filters` name. Session.reset sends
  no filters and waits forever for an exited worker; the wheel has no class for
  master.proto's ResetRequest (containers: field 1, filters: 2), so it is
  encoded here."""
  request = _field(1, container) + b"".join(
      _field(2, name) for name in device_filters)
  with grpc.insecure_channel(master.replace("grpc://", "", 1)) as channel:
    channel.unary_unary("/tensorflow.MasterService/Reset")(
        request, timeout=_RESET_TIMEOUT_S)


def active():
  """Whether the graphs built now are an evaluation on the ps tasks."""
  return _READING.get() is not None


@contextlib.contextmanager
def placed_on_ps():
  """Within `reading_on_ps`, variables made here go to the ps tasks, in the
  evaluation's container; elsewhere a no-op."""
  reading = _READING.get()
  if reading is None:
    yield
    return
  container, device_fn = reading
  with tf.compat.v1.device(device_fn), tf.compat.v1.container(container):
    yield

"""How many bytes each task of a job holds, said at start and checked: a
table that does not fit would fail late (an overfull ps task is killed
after minutes of initialisation), so it is refused before the first step."""
import collections
import dataclasses
import math
import os

from absl import logging
import tensorflow as tf

from estimator_scale import environment
from estimator_scale import errors
from estimator_scale import memory_limit

_MIB = float(1 << 20)
_GIB = float(1 << 30)


@dataclasses.dataclass(frozen=True)
class Capacity:
  """The bytes of a training graph's variables, and who holds them.

  Attributes:
    variable_bytes: the trainable variables.
    slot_bytes: other global variables: optimizer slots, counters.
    bytes_per_holder: {"ps:0": bytes, ...}, or {"each worker": bytes}.
    largest: (name, bytes) of the largest variable or part.
    shard_bytes: a worker's Horovod shards, their slots and bookkeeping.
  """
  variable_bytes: int
  slot_bytes: int
  bytes_per_holder: dict
  largest: tuple
  shard_bytes: int = 0

  def line(self):
    """The capacity line a job logs at start."""
    holders = ", ".join(f"{holder} {size / _MIB:.1f} MiB" for holder, size in
                        sorted(self.bytes_per_holder.items()))
    return (f"capacity: variables {self.variable_bytes / _MIB:.1f} MiB, "
            f"optimizer slots and state {self.slot_bytes / _MIB:.1f} MiB; "
            f"held by {holders}")


def _bytes(variable):
  shape = variable.shape
  if not shape.is_fully_defined():
    return 0
  return math.prod(shape.as_list()) * variable.dtype.base_dtype.size


def _holder(variable):
  spec = tf.DeviceSpec.from_string(variable.device or "")
  if spec.job == "ps":
    return f"ps:{spec.task or 0}"
  return "each worker"


def _shards(shard_collection):
  """Local variables of tables split over Horovod ranks: each shard in
  `shard_collection` and what is named under it (slots, bookkeeping)."""
  shards = tf.compat.v1.get_collection(shard_collection)
  prefixes = tuple(v.op.name + "/" for v in shards)
  return shards + [v for v in tf.compat.v1.local_variables()
                   if v.op.name.startswith(prefixes)
                   and not any(v is s for s in shards)] if shards else []


def measure(graph=None, shard_collection=None):
  """The `Capacity` of `graph`'s global variables, plus the Horovod shards
  in `shard_collection` where given."""
  graph = graph or tf.compat.v1.get_default_graph()
  with graph.as_default():
    trainable = {v.ref() for v in tf.compat.v1.trainable_variables()}
    variables = tf.compat.v1.global_variables()
    shards = []
    if shard_collection:
      known = {v.ref() for v in variables}
      shards = [v for v in _shards(shard_collection) if v.ref() not in known]
      variables += shards
  held = collections.Counter()
  sums = {True: 0, False: 0}
  largest = ("", 0)
  for variable in variables:
    size = _bytes(variable)
    held[_holder(variable)] += size
    sums[variable.ref() in trainable] += size
    if size > largest[1]:
      largest = (variable.op.name, size)
  return Capacity(sums[True], sums[False], dict(held), largest,
                  sum(_bytes(v) for v in shards))


def bytes_setting(environ, name, default):
  """The positive byte count `environ[name]`, else `default`; ConfigError
  naming the variable when it is not one."""
  raw = environ.get(name)
  if raw is None:
    return default
  try:
    value = int(raw)
  except ValueError:
    value = 0
  if value <= 0:
    raise errors.ConfigError(f"{name}={raw!r} must be a number of bytes > 0")
  return value


def task_memory(environ=None):
  """(bytes a task may hold, their source): the variable, else the cgroup's
  limit if below the host's memory, else the host's memory."""
  environ = os.environ if environ is None else environ
  host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  if environ.get(environment.TASK_MEMORY) is not None:
    return (bytes_setting(environ, environment.TASK_MEMORY, host),
            environment.TASK_MEMORY)
  limit = memory_limit.cgroup_limit()
  if limit is not None and limit[0] < host:
    return limit[0], f"this task's memory cgroup limit, {limit[1]}"
  return host, "the host's memory"


def _size(size):
  """Bytes in GiB, or MiB below one GiB."""
  if size >= _GIB:
    return f"{size / _GIB:.1f} GiB"
  return f"{size / _MIB:.1f} MiB"


def check(capacity, backend_name, memory, source=environment.TASK_MEMORY):
  """Raises ConfigError when a holder's bytes exceed `memory`.

  Args:
    capacity: `measure()`'s result.
    backend_name: the job's backend, named in the message.
    memory: bytes one task may hold (`task_memory()`).
    source: where `memory` comes from, for the message.
  """
  total = sum(capacity.bytes_per_holder.values())
  for holder, size in sorted(capacity.bytes_per_holder.items()):
    if size <= memory:
      continue
    name, largest = capacity.largest
    ps_tasks = max(2, math.ceil(total / memory))
    would = (f"{ps_tasks} ps tasks of {_size(memory)} would each hold about "
             f"{_size(total / ps_tasks)}")
    if holder == "each worker" and capacity.shard_bytes:
      fix = ("add ranks: each holds 1/N of the tables split over them "
             f"({capacity.shard_bytes / _MIB:.1f} MiB here)")
      where = (f"each worker of distribution={backend_name} holds its shard "
               "of the split tables and every other variable")
    elif holder == "each worker":
      fix = ("distribution=parameter_server splits large variables over "
             f"its ps tasks: {would}")
      where = f"each worker of distribution={backend_name} holds all of them"
    else:
      fix = ("add ps tasks: each holds about 1/N of every variable larger "
             f"than a slice, and {would} (--ps {ps_tasks})")
      where = f"ps task {holder} holds them under {backend_name}"
    raise errors.ConfigError(
        f"the model's variables do not fit: {where}, {size / _MIB:.1f} MiB "
        f"(variables and optimizer slots; the largest, {name}, is "
        f"{largest / _MIB:.1f} MiB), above the {memory / _MIB:.1f} MiB a task "
        f"may hold ({source}; {environment.TASK_MEMORY} sets it); {fix}, or "
        "make the tables smaller")


def log_and_check(backend_name, log_line, graph=None, shard_collection=None):
  """Measures the graph, logs the capacity line if `log_line`, checks it."""
  capacity = measure(graph, shard_collection)
  if log_line:
    logging.info("%s", capacity.line())
  check(capacity, backend_name, *task_memory())
  return capacity


class CheckHook(tf.estimator.SessionRunHook):
  """`log_and_check` of the training graph in `begin`, outside the model_fn,
  where autograph would turn the ConfigError into a StagingError."""

  def __init__(self, backend_name, log_line, shard_collection=None):
    self._backend_name = backend_name
    self._log_line = log_line
    self._shard_collection = shard_collection

  def begin(self):
    log_and_check(self._backend_name, self._log_line,
                  shard_collection=self._shard_collection)

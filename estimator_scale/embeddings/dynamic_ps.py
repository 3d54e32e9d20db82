"""Dynamic tables on parameter servers: each id's row on the ps task its
hash names.

A table over N ps tasks is N `dynamic.Table` parts; part i, with its index
and free rows, lives on task i and holds ids with `dynamic.owners(id, N)
== i`. Parts save as slices of one process's table; a restore into
another N is fixed up by the chief first (`dynamic_ps_moves`).
Synchronous: the chief admits once over every worker's ids (sent through
queues), matching one process until a task's share fills (eviction is
per task). Asynchronous: workers admit on their own; concurrent
admissions may share a row until the next session rebuilds the index.
"""
import contextlib
import contextvars
import dataclasses

from absl import logging
import tensorflow as tf

from estimator_scale import errors
from estimator_scale.embeddings import dynamic

MOST_TASKS = 64
"""The most ps tasks among which a lookup that finds rows on the wrong
task looks for the count the checkpoint was saved by."""

_PLACEMENT = contextvars.ContextVar("estimator_scale_dynamic_ps",
                                    default=None)


@dataclasses.dataclass(frozen=True)
class Placement:
  """Where a training graph's dynamic tables go on parameter servers.

  Attributes:
    ps_tasks, num_workers, worker_index, is_chief: the job's layout.
    synchronous: whether one update takes every worker's gradients.
    reading: whether the graph only reads its tables (`ps_reading`).
  """
  ps_tasks: int
  num_workers: int
  worker_index: int
  is_chief: bool
  synchronous: bool
  reading: bool = False


@contextlib.contextmanager
def placement(ps_tasks, topology):
  """Within it, dynamic tables made for training are split over the ps tasks
  (`embeddings.place_variables` wraps a ps job's model_fn in it)."""
  token = _PLACEMENT.set(Placement(
      max(1, ps_tasks), topology.num_workers, topology.worker_index,
      topology.is_chief, topology.synchronous))
  try:
    yield
  finally:
    _PLACEMENT.reset(token)


@contextlib.contextmanager
def reading_placement(ps_tasks):
  """Within it, tables are split as training split them, to be read there."""
  token = _PLACEMENT.set(Placement(max(1, ps_tasks), 1, 0, True, False,
                                   reading=True))
  try:
    yield
  finally:
    _PLACEMENT.reset(token)


def current():
  """The Placement of the graph being built, or None off ps."""
  return _PLACEMENT.get()


def tables(graph=None):
  """The PsTables made in `graph` (default: the current one)."""
  return [t for t in dynamic.named_tables(graph) if isinstance(t, PsTable)]


def split_capacity(capacity, ps_tasks):
  """Rows of each ps task's part (the first ones one larger; sum: capacity)."""
  return [dynamic.sharded.shard_range(capacity, ps_tasks, task)[1]
          for task in range(ps_tasks)]


@dataclasses.dataclass(frozen=True)
class Part:
  """Which part of a table a `dynamic.Table` is, and where it lives."""
  table: str
  task: int
  tasks: int
  capacity: int

  @property
  def place(self):
    """(index, count), as `sharded.shard_range` takes them reversed."""
    return (self.task, self.tasks)

  @property
  def device(self):
    """The ps task holding the part, its index and its free rows."""
    return f"/job:ps/task:{self.task}"

  @property
  def leaf(self):
    """A name for the part's own ops, unique over tables and tasks."""
    return f"{self.table.rpartition('/')[2]}_part_{self.task}"

  def whole_name(self, op_name, suffix):
    """The whole table's variable that `op_name` (part variable `suffix`) is a
    slice of."""
    own = f"part_{self.task}/{suffix}" if suffix else f"part_{self.task}"
    return op_name[:-len(own) - 1] + (f"/{suffix}" if suffix else "")

  def check_owned(self, held, rows):
    """An op failing when a restored id of `held` (in rows `rows`) belongs to
    another task: the checkpoint was saved by another number of ps tasks."""
    owned = tf.equal(dynamic.owners(held, self.tasks), self.task)
    return tf.debugging.Assert(tf.reduce_all(owned), [
        f"dynamic table {self.table!r}: its checkpoint was saved by",
        saved_tasks(held, rows, self.capacity),
        f"ps tasks (1: or by one process), this job has {self.tasks}, and "
        "its rows are not on their ids' tasks yet: the chief moves them as "
        "its session starts (dynamic_ps_moves), and an asynchronous worker "
        "that looks up before then stops here; start it again"])


def saved_tasks(held, rows, capacity, most=MOST_TASKS):
  """The fewest tasks (or ranks) above 1 whose layout puts every id of `held`
  in its row of `rows`, else 1 (int64 scalar)."""
  fits = [tf.reduce_all(tf.equal(
      dynamic.owners(held, count),
      dynamic.sharded._owners(rows, capacity, count)))  # pylint: disable=protected-access
          for count in range(2, most + 1)]
  found = tf.where(tf.stack(fits))[:, 0]
  return tf.cond(tf.size(found) > 0, lambda: found[0] + 2,
                 lambda: tf.constant(1, tf.int64))


class PsTable:
  """A dynamic table split over the ps tasks: `name` in the current scope,
  the user's `dynamic.Options`, and the `Placement` `where`."""

  def __init__(self, name, options, where):
    self.options, self.name, self.where = options, name, where
    self.shard = None
    self.trained = False
    scope = tf.compat.v1.get_variable_scope()
    self.whole = f"{scope.name}/{name}" if scope.name else name
    self.parts = []
    for task in range(where.ps_tasks):
      with tf.compat.v1.device(f"/job:ps/task:{task}"):
        self.parts.append(dynamic.Table(
            f"{name}/part_{task}", options,
            ps_part=Part(self.whole, task, where.ps_tasks,
                         options.capacity)))
    self.pool = self.parts[0].pool
    self._queues = {}

  def _queue(self, kind, worker):
    """Worker `worker`'s queue of `kind` ("ids" to the chief, "rows" back),
    shared by every task by name."""
    if (kind, worker) not in self._queues:
      name = f"dynamic_ps/{self.whole}/{kind}_{worker}"
      dtypes = [tf.int64, tf.int64] if kind == "ids" else [tf.int64]
      with tf.init_scope(), tf.compat.v1.device(
          tf.compat.v1.train.get_or_create_global_step().device):
        self._queues[kind, worker] = tf.queue.FIFOQueue(
            -1, dtypes, shared_name=name, name=name.replace("/", "_"))
    return self._queues[kind, worker]

  def _by_part(self, keys_, *values):
    """(positions, keys, *values) of each part, by the keys' owner."""
    owner = dynamic.owners(keys_, self.where.ps_tasks)
    n = self.where.ps_tasks
    positions = tf.dynamic_partition(tf.range(tf.shape(keys_)[0]), owner, n)
    return [positions] + [tf.dynamic_partition(v, owner, n)
                          for v in (keys_,) + values]

  def train_rows(self, unique, counts, step):
    """Each unique key's row in its part (-1: unadmitted)."""
    positions, keys_, counts_ = self._by_part(unique, counts)
    rows = []
    for part, mine, count in zip(self.parts, keys_, counts_):
      with tf.compat.v1.device(part.ps_part.device):
        rows.append(part.train_rows(mine, count, step))
    return tf.dynamic_stitch(positions, rows)

  def _vectors(self, unique, rows, counts=None):
    """The rows' vectors from their parts (`dynamic.Table._vectors`)."""
    if counts is None:
      positions, _, rows_ = self._by_part(unique, rows)
      counts_ = [None] * len(self.parts)
    else:
      positions, _, rows_, counts_ = self._by_part(unique, rows, counts)
    vectors = []
    for part, mine, count in zip(self.parts, rows_, counts_):
      with tf.compat.v1.device(part.ps_part.device):
        vectors.append(part._vectors(mine, count))  # pylint: disable=protected-access
    return tf.dynamic_stitch(positions, vectors)

  def _chief_rows(self, unique, counts, step):
    """The chief's rows of its ids, after admitting over every worker's ids,
    whose rows it sends back."""
    others = [w for w in range(self.where.num_workers)
              if w != self.where.worker_index]
    asked = [self._queue("ids", w).dequeue() for w in others]
    every = tf.concat([unique] + [a[0] for a in asked], 0)
    every_count = tf.concat([counts] + [a[1] for a in asked], 0)
    mine, where = tf.unique(every, out_idx=tf.int64)
    totals = tf.math.unsorted_segment_sum(every_count, where,
                                          tf.shape(mine)[0])
    rows = tf.gather(self.train_rows(mine, totals, step), where)
    sizes = [tf.shape(unique)[0]] + [tf.shape(a[0])[0] for a in asked]
    answers = tf.split(rows, tf.stack(sizes))
    sent = [self._queue("rows", w).enqueue([answer])
            for w, answer in zip(others, answers[1:])]
    with tf.control_dependencies(sent):
      return tf.identity(answers[0])

  def _worker_rows(self, unique, counts):
    """A worker's rows of its ids, from the chief."""
    me = self.where.worker_index
    sent = self._queue("ids", me).enqueue([unique, counts])
    with tf.control_dependencies([sent]):
      return self._queue("rows", me).dequeue()

  def lookup(self, keys_, training):
    """See `dynamic.Table.lookup`."""
    unique, positions, counts = tf.unique_with_counts(keys_, out_idx=tf.int64)
    if not training:
      rows = tf.dynamic_stitch(*self._read_only(unique))
    elif not self.where.synchronous or self.where.num_workers == 1:
      rows = self.train_rows(unique, counts, dynamic._update_number())  # pylint: disable=protected-access
    elif self.where.is_chief:
      rows = self._chief_rows(unique, counts, dynamic._update_number())  # pylint: disable=protected-access
    else:
      rows = self._worker_rows(unique, counts)
    rows = tf.reshape(rows, [-1])
    return tf.gather(self._vectors(unique, rows, counts if training else None),
                     positions)

  def _read_only(self, unique):
    """(positions, rows) of `unique` in each part, outside training."""
    positions, keys_ = self._by_part(unique)
    rows = []
    for part, mine in zip(self.parts, keys_):
      with tf.compat.v1.device(part.ps_part.device):  # its index there too
        rows.append(part.read_only_rows(mine))
    return positions, rows

  def usage(self):
    """See `dynamic.Table.usage`: summed over the parts."""
    used = [part.usage() for part in self.parts]
    return {key: tf.add_n([u[key] for u in used]) for key in used[0]}


def make(name, options, where):
  """The PsTable `name`; ConfigError if capacity < ps tasks."""
  if options.capacity < where.ps_tasks:
    raise errors.ConfigError(
        f"dynamic table {name!r}: capacity={options.capacity} is smaller "
        f"than the {where.ps_tasks} ps tasks it is split over")
  table = PsTable(name, options, where)
  if where.reading:
    logging.info("Dynamic table %s read on the %d ps tasks, each its own "
                 "rows", table.whole, where.ps_tasks)
  return table


dynamic.place_with(current, make)

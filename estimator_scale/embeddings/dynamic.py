"""Embedding tables keyed by the raw id: they admit, evict and stay bounded.

Each raw id (int64, or a string fingerprinted to 63 bits) gets a row of a
fixed pool of `capacity` rows: no vocabulary, no shared rows. The pool,
slots, per-row bookkeeping and the count-min `sketch` of rowless ids are
checkpointed variables; `ids` (-1 where free) is the one truth, the
id -> row index is rebuilt from it after a restore.

A training lookup is one kernel (kernels/dynamic_rows.cc): it expires,
admits ids seen `min_count` times (the sketch never undercounts), evicts
by `eviction` at least 1/EVICT_FRACTION of a full table among rows this
update did not look up, and reads zeros without gradient for rowless or
negative ids. Decisions depend only on the multiset of ids and the
update, so split tables (`Table._exchange`, `dynamic_ps`) decide as one
process. Outside training lookups only read, via core ops.
"""
import contextlib
import dataclasses
import functools
import numbers

import tensorflow as tf

from tensorflow.python.ops import resource_variable_ops  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.ops import variables as tf_variables  # pylint: disable=g-direct-tensorflow-import

from estimator_scale import errors
from estimator_scale import graph_state
from estimator_scale.embeddings import compact
from estimator_scale.embeddings import deltas
from estimator_scale.embeddings import native
from estimator_scale.embeddings import sharded
from estimator_scale import precision

try:
  native.ops()  # a parameter server runs the kernel without making a table
except errors.ConfigError:
  pass  # raised where a table is made (make_table), not at every import


@tf.RegisterGradient("EsDynamicTableRead")
def _read_gradient(op, grad, *unused):
  """The pool's gradient from `Table._read`: to the rows of found ids only."""
  del unused
  at, found_rows = op.outputs[1], op.outputs[2]
  return (tf.IndexedSlices(tf.gather(grad, at), found_rows,
                           resource_variable_ops.variable_shape(op.inputs[0])),
          None)

EVICTIONS = ("lru", "lfu")
"""`eviction` values: which rows go first when the pool is full."""

SKETCH_WIDTH = 1 << 20
SKETCH_DEPTH = 4

FREE = -1
NEVER = (1 << 63) - 1
"""A free row's last update: later than any, so no scan takes it for a
stale or an evictable row."""
EVICT_FRACTION = 16
"""A full table frees at least 1/EVICT_FRACTION of its rows at once."""


def expiry_period(steps_to_live):
  """Updates between expiry scans: rows live <= 1.25 x steps_to_live unseen."""
  return max(1, -(-steps_to_live // 4))
_MULTIPLIERS = (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB,
                0xD6E8FEB86659FD93, 0xA0761D6478BD642F, 0xE7037ED1A0B428DB,
                0xC2B2AE3D27D4EB4F)
"""Odd 64-bit constants: one integer mix each for the initial vectors, the
sketch's rows and the owner rank (the last one finishes every mix), so each
hashes the id independently; the kernel is given them (as int64)."""



def _outer_graph():
  """The graph variables live in (accumulation traces in a function graph)."""
  with tf.init_scope():
    return tf.compat.v1.get_default_graph()


def _update_number():
  """The update number (global step), read once per graph outside any
  control flow, device or function the lookup is made in."""
  state = graph_state.of(_outer_graph())
  if state.update_number is None:
    with tf.init_scope(), tf.compat.v1.device(None):
      state.update_number = tf.cast(
          tf.compat.v1.train.get_or_create_global_step(), tf.int64)
  return state.update_number


@dataclasses.dataclass(frozen=True)
class Options:
  """What a table's user chose; checked once, where it is made."""
  dimension: int
  capacity: int
  min_count: int = 1
  steps_to_live: int = None
  eviction: str = "lru"
  initializer: object = None


def _filled(shape, dtype=None, partition_info=None, value=0):
  """Initializer of `value` from `Empty`: a constant or fill would be folded
  into a graph constant the size of the variable, kept for good."""
  del partition_info
  zeros = tf.raw_ops.Empty(shape=tf.TensorShape(shape).as_list(), dtype=dtype,
                           init=True)
  return zeros + tf.constant(value, dtype) if value else zeros


def check_options(options, name):
  """Raises ConfigError naming the argument when an option is invalid."""
  for argument in ("dimension", "capacity", "min_count"):
    value = getattr(options, argument)
    if (not isinstance(value, numbers.Integral) or isinstance(value, bool)
        or value < 1):
      raise errors.ConfigError(
          f"dynamic table {name!r}: {argument}={value!r} must be an integer "
          ">= 1")
  ttl = options.steps_to_live
  if ttl is not None and (not isinstance(ttl, numbers.Integral)
                          or isinstance(ttl, bool) or ttl < 1):
    raise errors.ConfigError(
        f"dynamic table {name!r}: steps_to_live={ttl!r} must be an integer "
        ">= 1, or None (rows live until the table is full)")
  if options.eviction not in EVICTIONS:
    raise errors.ConfigError(
        f"dynamic table {name!r}: eviction={options.eviction!r} is unknown; "
        f"valid: {', '.join(EVICTIONS)}")


def keys(ids):
  """Ids as int64: strings fingerprinted to 63 bits (collision ~n^2/2^64)."""
  if ids.dtype == tf.string:
    return tf.strings.to_hash_bucket_fast(ids, (1 << 63) - 1)
  if not ids.dtype.is_integer:
    raise errors.ConfigError(
        f"dynamic table: ids must be integers or strings, got {ids.dtype.name}")
  return tf.cast(ids, tf.int64)


def mix(keys_, which):
  """A 64-bit hash of each int64 key, by `_MULTIPLIERS[which]`."""
  x = tf.bitcast(keys_, tf.uint64) * tf.constant(_MULTIPLIERS[which],
                                                 tf.uint64)
  x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(
      x, tf.constant(29, tf.uint64)))
  x = x * tf.constant(_MULTIPLIERS[-1], tf.uint64)
  x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(
      x, tf.constant(32, tf.uint64)))
  return tf.bitcast(x, tf.int64)


def owners(keys_, count):
  """The Horovod rank holding each key's row (int32), by its own hash."""
  return tf.cast(bucket(keys_, len(_MULTIPLIERS) - 2, count), tf.int32)


def bucket(keys_, which, buckets):
  """Each key's bucket in [0, buckets) by hash `which`."""
  return tf.math.floormod(mix(keys_, which), buckets)


def drawn_vectors(keys_, dimension, initializer):
  """Admitted ids' vectors from a user's initializer; without one, the kernel
  draws from each id's hash, so split tables start ids as one process."""
  try:
    return tf.cast(initializer([tf.shape(keys_)[0], dimension],
                               dtype=tf.float32), tf.float32)
  except (TypeError, ValueError, NotImplementedError) as error:
    raise errors.ConfigError(
        f"dynamic table: initializer {initializer!r} cannot draw rows of a "
        f"shape known only at run time ({error}); pass a v1, TF 2 or Keras "
        "random, zeros or ones initializer, a function of (shape, dtype), "
        "or None") from error


@contextlib.contextmanager
def _unsplit():
  """A variable scope without a ps job's partitioner: a table is one
  variable its lookups scatter into; `dynamic_ps` splits it by id."""
  with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(),
                                   auxiliary_name_scope=False) as scope:
    scope.set_partitioner(None)
    yield


class Table:
  """One pool of rows and its bookkeeping, on one process or one task.

  Args:
    name: the variables' name prefix, in the current variable scope.
    options: the user's `Options`.
    getter: makes a variable with get_variable's arguments, or None.
    shard: (rank, ranks) of a Horovod rank's part (local variables).
    ps_part: a `dynamic_ps.Part` (global variables, saved as slices).
  """

  def __init__(self, name, options, getter=None, shard=None, ps_part=None):
    getter = getter or tf.compat.v1.get_variable
    self.options, self.name, self.shard = options, name, shard
    self.ps_part = ps_part
    self._leaf = name.rpartition("/")[2]
    dimension = options.dimension
    self.first_row, self.rows = 0, options.capacity
    self.first_cell, self.width = 0, SKETCH_WIDTH
    part = shard if ps_part is None else ps_part.place
    if ps_part is not None:
      self._leaf = ps_part.leaf
    if part is not None:
      self.first_row, self.rows = sharded.shard_range(options.capacity,
                                                      *reversed(part))
      self.first_cell, self.width = sharded.shard_range(SKETCH_WIDTH,
                                                        *reversed(part))
    # A shard's variables are this rank's own (local, out of rank 0's
    # broadcast) and saved as slices of the whole table's by
    # shard_checkpoints, which merges them into one process's table; a
    # restore into another number of ranks moves each row to its id's
    # owner there (dynamic_reshard).
    local = sharded.shard_collections()
    made = []

    def variable(suffix, shape, dtype, value, whole_rows, first,
                 trainable=False, also=()):
      with _unsplit():
        made.append(getter(
            f"{name}/{suffix}" if suffix else name, shape=shape, dtype=dtype,
            initializer=functools.partial(_filled, value=value),
            collections=None if shard is None else local + list(also),
            trainable=trainable))
      if part is not None:
        full = [whole_rows] + list(shape[1:])
        # A ps part's slice is of the whole table's name, as one process
        # saves it.
        whole = made[-1].op.name if ps_part is None else ps_part.whole_name(
            made[-1].op.name, suffix)
        made[-1]._set_save_slice_info(tf_variables.Variable.SaveSliceInfo(  # pylint: disable=protected-access
            whole, full, [first] + [0] * (len(shape) - 1), list(shape)))
      return made[-1]

    rows, capacity = self.rows, options.capacity
    with precision.variables_as_stored():
      self.pool = variable("", [rows, dimension], tf.float32, 0.0, capacity,
                           self.first_row, trainable=True,
                           also=[sharded.COLLECTION])
    self.ids = variable("ids", [rows], tf.int64, FREE, capacity,
                        self.first_row)
    self.last_seen = variable("last_seen", [rows], tf.int64, NEVER,
                              capacity, self.first_row)
    self.counts = variable("counts", [rows], tf.int64, 0, capacity,
                           self.first_row)
    self.fresh = variable("fresh", [rows], tf.bool, False, capacity,
                          self.first_row)
    self.sketch = None
    if options.min_count > 1:
      self.sketch = variable("sketch", [self.width, SKETCH_DEPTH], tf.int32,
                             0, SKETCH_WIDTH, self.first_cell)
    if part is None:
      # Evaluation and export under Horovod restore a whole table from the
      # merged slices (shard_checkpoints.WholeTablesSaver).
      whole = tf.compat.v1.get_collection_ref(sharded.WHOLE_COLLECTION)
      whole.extend(v for v in made if not any(v is w for w in whole))
    with tf.init_scope(), self._on_task():
      # Since this process started (progress lines): not in checkpoints.
      self.evicted = tf.compat.v1.Variable(
          tf.constant(0, tf.int64), trainable=False,
          name=f"{self._leaf}_evicted",
          collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])
    graph_state.of(_outer_graph()).tables[self.pool.ref()] = self
    self._static = None
    self.trained = False  # whether a training graph looks it up
    self.trained_usage = None  # `usage()`, made where training looks it up
    self.changes = None  # rows changed since the last save (`deltas`)

  def _on_task(self):
    """Device of the kernel's own state: a ps part's task, else default."""
    return (contextlib.nullcontext() if self.ps_part is None
            else tf.compat.v1.device(self.ps_part.device))

  def _index(self):
    """The kernel's id -> row index and free-row stack; unsaved, rebuilt from
    `ids` by each session's first lookup."""
    if not hasattr(self, "_handle"):
      with tf.init_scope(), self._on_task():
        # Named after the table's rows: every worker's graph of a
        # parameter-server job reaches the one index on the task.
        self._handle = native.ops().es_dynamic_table_index(
            shared_name=f"{self.pool.op.name}/index",
            name=f"{self._leaf}_index")
        self._built = tf.compat.v1.Variable(
            False, trainable=False, name=f"{self._leaf}_index_built",
            collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])
    return self._handle

  def _restore_checks(self):
    """On a ps, checks restored ids are this task's before the first lookup."""
    if self.ps_part is None:
      return []

    def check():
      used = tf.where(self.ids >= 0)[:, 0]
      with tf.control_dependencies([self.ps_part.check_owned(
          tf.gather(self.ids, used), self.first_row + used)]):
        return tf.constant(True)
    return [tf.cond(self._built, lambda: tf.constant(True), check)]

  def read_only_rows(self, keys_):
    """Rows of `keys_` outside training (-1: unadmitted), by a static table."""
    if self._static is None:
      used = tf.where(self.ids >= 0)[:, 0]
      self._static = tf.lookup.StaticHashTable(
          tf.lookup.KeyValueTensorInitializer(tf.gather(self.ids, used),
                                              used),
          default_value=FREE, name=f"{self._leaf}_served_index")
    return self._static.lookup(keys_)

  def train_rows(self, keys_, counts, step):
    """The row of each of `keys_` (-1: unadmitted), each seen `counts` times,
    after expiry, admission and eviction (see the module docstring)."""
    options = self.options
    ttl = options.steps_to_live
    index = self._index()
    # Without a sketch the kernel reads none; any variable fills its place.
    sketch = self.sketch if self.sketch is not None else self.ids
    with tf.control_dependencies(self._restore_checks()):
      rows, admitted_rows, admitted_keys = (
          native.ops().es_dynamic_table_train_rows(
              index, self.ids.handle, self.last_seen.handle,
              self.counts.handle, self.fresh.handle, self.pool.handle,
              self.evicted.handle, self._built.handle, sketch.handle, keys_,
              counts, step, min_count=options.min_count,
              steps_to_live=0 if ttl is None else ttl,
              expiry_period=1 if ttl is None else expiry_period(ttl),
              lfu=options.eviction == "lfu", evict_fraction=EVICT_FRACTION,
              hash_vectors=options.initializer is None,
              with_sketch=self.sketch is not None,
              multipliers=[m - (1 << 64) if m >> 63 else m
                           for m in _MULTIPLIERS]))
    done = []
    if deltas.tracking_on():
      if self.changes is None:
        self.changes = deltas.Changes(self.ids, self.ids)
      done.append(self.changes.mark(rows))
    if options.initializer is not None:
      done.append(tf.compat.v1.scatter_update(
          self.pool, admitted_rows, drawn_vectors(
              admitted_keys, options.dimension, options.initializer)))
    if not done:
      return rows
    with tf.control_dependencies(done):
      return tf.identity(rows)

  def lookup(self, keys_, training):
    """Vectors of `keys_` (flat int64): zeros where an id has no row."""
    if not training and self.shard is None:
      return self._vectors(self.read_only_rows(keys_))
    if not training:
      unique, positions = tf.unique(keys_, out_idx=tf.int64)
      return tf.gather(self._read_exchange(unique), positions)
    if self.shard is None:
      return self._read(self.train_rows(keys_, tf.ones_like(keys_),
                                        _update_number()))
    unique, positions, counts = tf.unique_with_counts(keys_, out_idx=tf.int64)
    return tf.gather(self._exchange(unique, counts), positions)

  def _vectors(self, rows, counts=None):
    """The pool's `rows`, zeros where -1, gathering admitted rows only (a zero
    gradient reaching a row would still move it under Adam); `counts`: the
    lookups each row sums, for CowClip."""
    at = tf.where(rows >= 0)
    found = tf.gather_nd(rows, at)
    if counts is not None:
      sharded.record_counts(found, lambda: tf.cast(tf.gather_nd(counts, at),
                                                   tf.float32))
    vectors = tf.scatter_nd(
        at, tf.gather(self.pool, found),
        tf.stack([tf.shape(rows, out_type=tf.int64)[0],
                  tf.constant(self.options.dimension, tf.int64)]))
    vectors.set_shape([rows.shape[0], self.options.dimension])
    return vectors

  def _read(self, rows):
    """`_vectors` in one kernel whose gradient reaches admitted rows only."""
    vectors = native.ops().es_dynamic_table_read(self.pool.handle, rows)[0]
    vectors.set_shape([rows.shape[0], self.options.dimension])
    return vectors

  def _exchange(self, unique, counts):
    """This rank's unique ids' vectors, from their owners (alltoall), who admit
    over every rank's ids at once; gradients return divided by rank count."""
    hvd, order, splits, asked, asked_splits = _ask_owners(unique)
    asked_counts, _ = hvd.alltoall(tf.gather(counts, order), splits=splits)
    mine, where = tf.unique(asked, out_idx=tf.int64)
    totals = tf.math.unsorted_segment_sum(asked_counts, where,
                                          tf.shape(mine)[0])
    rows = self.train_rows(mine, totals, _update_number())
    read = self._read(rows)
    found = read.op  # its gradient's rows: `found.outputs[2]`
    sharded.record_counts(found.outputs[2], lambda: tf.gather(
        tf.cast(totals, tf.float32), found.outputs[1]) / hvd.size())
    answered = sharded._send_rows(  # pylint: disable=protected-access
        hvd, tf.gather(read, where), asked_splits, "none")
    vectors = tf.gather(sharded._mean_over_ranks(answered, hvd.size()),  # pylint: disable=protected-access
                        tf.math.invert_permutation(order))
    sharded.lookups().append(sharded.Lookup(self.pool, unique, vectors))
    return vectors

  def _read_exchange(self, unique):
    """Owners' rows for this rank's ids, as `_exchange` but read-only."""
    hvd, order, _, asked, asked_splits = _ask_owners(unique)
    answered = sharded._send_rows(  # pylint: disable=protected-access
        hvd, self._vectors(self.read_only_rows(asked)), asked_splits, "none")
    return tf.gather(answered, tf.math.invert_permutation(order))

  def usage(self):
    """{"rows": rows in use, "evicted": rows freed since start} (int64)."""
    return {"rows": tf.math.count_nonzero(self.ids >= 0),
            "evicted": self.evicted.read_value()}


def _ask_owners(unique):
  """(hvd, order by owner, splits, ids asked of this rank, their splits):
  the first alltoall of a table split over the ranks."""
  hvd = sharded.horovod()
  owner = owners(unique, hvd.size())
  order = tf.argsort(owner, stable=True)
  splits = tf.math.bincount(owner, minlength=hvd.size(),
                            maxlength=hvd.size(), dtype=tf.int32)
  asked, asked_splits = hvd.alltoall(tf.gather(unique, order), splits=splits)
  return hvd, order, splits, asked, asked_splits


def table_of(variable):
  """The Table whose pool `variable` is, or None."""
  return graph_state.of(_outer_graph()).tables.get(variable.ref())


def lookup_table_of(variable):
  """The table a lookup of `variable` goes through (on ps: the whole one)."""
  for table in graph_state.of(_outer_graph()).named_tables.values():
    if table.pool is variable or table.pool.ref() == variable.ref():
      return table
  return table_of(variable)


def tables(graph=None):
  """The dynamic tables made in `graph` (default: the current one)."""
  return list(graph_state.of(graph or _outer_graph()).tables.values())


def named_tables(graph=None):
  """The tables `dynamic_embedding` made by name in `graph` (or this one)."""
  return list(graph_state.of(graph or _outer_graph()).named_tables.values())


def training_usage():
  """{table: `Table.usage()`} of this training graph's tables."""
  return {getattr(t, "whole", t.pool.op.name): t.trained_usage
          for t in tables() if t.trained_usage is not None}


def slot_initial_value(optimizer, slot_name):
  """A slot's initial value: Adagrad/FTRL accumulators' own, else 0."""
  if slot_name in ("accumulator", "accum"):
    return float(getattr(optimizer, "_initial_accumulator_value", 0.0))
  return 0.0


def reset_slots_on_admission(optimizer):
  """Makes `optimizer` (v1 or Keras) reset fresh rows' slots in its sparse
  apply: slots are made after the network, so admission can't write them."""
  apply = optimizer._resource_apply_sparse_duplicate_indices  # pylint: disable=protected-access
  if getattr(apply, "resets_fresh_rows", False):
    return

  def reset_then_apply(grad, variable, indices, *args, **kwargs):
    table = table_of(variable)
    if table is None:
      with tf.control_dependencies(deltas.mark_static(optimizer, variable,
                                                      indices)):
        return apply(grad, variable, indices, *args, **kwargs)
    named = [(optimizer.get_slot(variable, name), name)
             for name in optimizer.get_slot_names()]
    named = [(slot, name) for slot, name in named if slot is not None]
    if table.changes is not None:
      deltas.check_optimizer(optimizer, table.name)
      deltas.record_slots(variable, [slot for slot, _ in named])
    # A synchronous accumulator's take has indices of unknown rank.
    reset = native.ops().es_dynamic_table_reset_fresh(
        table.fresh.handle, [slot.handle for slot, _ in named],
        tf.cast(tf.reshape(indices, [-1]), tf.int64),
        values=[slot_initial_value(optimizer, name) for _, name in named])
    with tf.control_dependencies([reset]):
      return apply(grad, variable, indices, *args, **kwargs)
  reset_then_apply.resets_fresh_rows = True
  _slots_from_empty(optimizer)
  optimizer._resource_apply_sparse_duplicate_indices = reset_then_apply  # pylint: disable=protected-access


def check_trainers(topology):
  """Raises ConfigError where several trainers of `topology` would each keep
  their own index of a one-process table, silently disagreeing."""
  trainers = topology.num_workers * topology.replicas_per_worker
  alone = [t.name for t in tables()
           if t.shard is None and t.ps_part is None and t.trained]
  if trainers > 1 and alone:
    raise errors.ConfigError(
        f"dynamic table {alone[0]!r}: backend {topology.backend.name!r} "
        f"trains with {trainers} workers or replicas, each of which would "
        "keep its own copy of the table; dynamic tables train on one "
        "process, over Horovod ranks (--distribution=horovod) or over "
        "parameter servers (--distribution=parameter_server, --ps_sync for "
        "one process's updates). Use one of those, or a hashed table "
        "(es.sharded_embedding or a partitioned one) here")


_SLOTS = ((tf.compat.v1.train.AdagradOptimizer, ("accumulator",)),
          (tf.compat.v1.train.FtrlOptimizer, ("accum", "linear")),
          (tf.compat.v1.train.AdamOptimizer, ("m", "v")),
          (tf.compat.v1.train.MomentumOptimizer, ("momentum",)))
"""The slots of TensorFlow's v1 optimizers, by class."""


def _slots_from_empty(optimizer):
  """Makes a v1 optimizer's pool slots start from `Empty` (`_filled`), not a
  constant folded to the pool's size and kept by the session."""
  names = next((n for kind, n in _SLOTS if isinstance(optimizer, kind)), ())
  if not names:
    return
  create_slots = optimizer._create_slots  # pylint: disable=protected-access

  def create(variables):
    for variable in variables:
      if table_of(variable) is not None:
        for name in names:
          optimizer._get_or_make_slot_with_initializer(  # pylint: disable=protected-access
              variable, functools.partial(
                  _filled, value=slot_initial_value(optimizer, name)),
              variable.shape, variable.dtype.base_dtype, name,
              optimizer._name)  # pylint: disable=protected-access
    create_slots(variables)
  optimizer._create_slots = create  # pylint: disable=protected-access


def _check_no_strategy(name):
  """Raises ConfigError under a multi-replica tf.distribute strategy, which
  `check_trainers` would see too late."""
  if (tf.distribute.has_strategy()
      and tf.distribute.get_strategy().num_replicas_in_sync > 1):
    raise errors.ConfigError(
        f"dynamic table {name!r}: tf.distribute's "
        f"{type(tf.distribute.get_strategy()).__name__} trains it on "
        f"{tf.distribute.get_strategy().num_replicas_in_sync} replicas, "
        "each of which would keep its own copy of the table; dynamic tables "
        "train on one process, over Horovod ranks (--distribution=horovod) "
        "or over parameter servers (--distribution=parameter_server); use "
        "one of those, or a hashed table (es.sharded_embedding) here")


def _training_graph():
  """Whether lookups may admit (not in eval, predict or export graphs)."""
  return sharded.training_graph()


_PLACED = None
"""(current, make) of `dynamic_ps`, which hands them over when imported:
a table is split over parameter servers only inside its placement, and
this module imports nothing of it (it builds on this one)."""


def place_with(current, make):
  """Has `make_table` place tables on ps via `current()` and `make`."""
  global _PLACED
  _PLACED = (current, make)


def make_table(name, options, getter=None):
  """The Table `name` in the current variable scope, checked; made once per
  graph and scope (a repeat call must give the same options)."""
  check_options(options, name)
  native.ops()
  scoped = f"{tf.compat.v1.get_variable_scope().name}/{name}"
  named = graph_state.of(_outer_graph()).named_tables
  if scoped not in named and compact.active() is not None:
    with precision.variables_as_stored(), _unsplit():
      named[scoped] = compact.ServedTable(name, options, getter)
  if scoped not in named:
    where = None if _PLACED is None else _PLACED[0]()
    if where is not None and not where.reading and sharded._WHOLE.get():  # pylint: disable=protected-access
      where = None
    if where is not None:
      if getter is not None:
        raise errors.ConfigError(
            f"dynamic table {name!r}: input_layer's columns cannot split it "
            "over parameter servers; use tf.keras.layers.DenseFeatures, "
            "es.DynamicEmbedding or es.dynamic_embedding there")
      named[scoped] = _PLACED[1](name, options, where)
      return named[scoped]
    hvd = None if sharded._WHOLE.get() else sharded.horovod()  # pylint: disable=protected-access
    shard = None
    if hvd is not None:
      if options.capacity < hvd.size():
        raise errors.ConfigError(
            f"dynamic table {name!r}: capacity={options.capacity} is "
            f"smaller than the {hvd.size()} Horovod ranks")
      shard = (hvd.rank(), hvd.size())
    named[scoped] = Table(name, options, getter=getter, shard=shard)
  elif (dataclasses.replace(named[scoped].options, initializer=None)
        != dataclasses.replace(options, initializer=None)):
    raise errors.ConfigError(
        f"dynamic table {scoped!r} was made with {named[scoped].options}; "
        f"a second lookup asks for {options}: give it another name")
  return named[scoped]


def lookup(table, ids, training=None):
  """Vectors of `ids` in `table`: ids.shape + [dimension], network dtype."""
  training = _training_graph() if training is None else training
  if training and not table.trained:
    _check_no_strategy(table.name)
    table.trained = True
    with tf.init_scope():
      table.trained_usage = table.usage()
  flat = ids.shape.rank == 1  # the vectors' shape already
  vectors = table.lookup(keys(ids if flat else tf.reshape(ids, [-1])),
                         training)
  read_dtype = precision.network_dtype()
  if read_dtype is not None:
    vectors = tf.cast(vectors, read_dtype)
  if flat:
    return vectors
  return tf.reshape(vectors, tf.concat(
      [tf.shape(ids), [table.options.dimension]], 0))


def dynamic_embedding(ids, dimension, capacity, name="embedding", min_count=1,
                      steps_to_live=None, initializer=None, eviction="lru"):
  """Looks raw ids up in a table that gives each id its own row.

  Args:
    ids: integer or string ids, any shape; negative integers are missing
      (zeros, never a row).
    dimension, capacity: the vectors' length; the most ids held at once.
    name: the table's name.
    min_count: sightings before an id gets a row (until then: zeros).
    steps_to_live: updates without a lookup before a row is freed (None:
      until the pool is full).
    initializer: draws admitted rows (None: from each id's hash).
    eviction: which rows go when the pool is full: "lru" or "lfu".

  Returns:
    The vectors, of shape `ids.shape + [dimension]`.
  """
  options = Options(dimension, capacity, min_count, steps_to_live, eviction,
                    initializer)
  return lookup(make_table(name, options), ids)

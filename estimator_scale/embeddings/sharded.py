"""Embedding tables sharded over Horovod ranks, looked up all-to-all.

Horovod replicates every variable, bounding a table by one rank's memory.
`sharded_embedding` gives each of N ranks a contiguous range of rows (the
first `rows % N` one more) with its slots; ranges, not `id % N`, so a
shard is a `SaveSliceInfo` slice and checkpoints fit any N (hash ids, or
frequent neighbours share a rank). A lookup is a collective: unique ids
go to their owners and rows come back (two alltoalls); the gradient
returns the same way divided by N, the mean a replicated table would get.
Shards and slots are local variables, out of the allreduce (`is_sharded`)
and rank 0's broadcast. Tables stay float32 under mixed precision (a cast
read would copy them whole).
"""
import contextlib
import contextvars
import dataclasses
import numbers
import sys

import tensorflow as tf
from tensorflow.python.ops import variables as tf_variables

from estimator_scale import choices
from estimator_scale import errors
from estimator_scale.embeddings import initializers
from estimator_scale import gradients as gradients_lib
from estimator_scale import graph_state
from estimator_scale import precision

COLLECTION = "estimator_scale_sharded_tables"
"""Graph collection of the sharded tables' variables (this rank's shard)."""

WHOLE_COLLECTION = "estimator_scale_whole_tables"
"""Graph collection of the tables `sharded_embedding` made whole."""

_WHOLE = contextvars.ContextVar("estimator_scale_whole_tables", default=False)
_ON_RANKS = contextvars.ContextVar("estimator_scale_read_on_ranks",
                                   default=False)


@dataclasses.dataclass(frozen=True)
class Lookup:
  """One lookup of a sharded table, as AdaScale's norms need it.

  Attributes:
    table: the shard variable.
    ids: the unique ids looked up (int64, global row numbers).
    vectors: their rows; its gradient is this rank's own for those rows.
  """
  table: tf.Variable
  ids: tf.Tensor
  vectors: tf.Tensor


def lookups(graph=None):
  """The sharded-table lookups made in `graph` (default: the current one)."""
  return graph_state.of(graph or tf.compat.v1.get_default_graph()).lookups


@contextlib.contextmanager
def whole_tables():
  """Within it, tables are one whole variable whatever the number of ranks:
  graphs one process runs alone (evaluation, prediction, export)."""
  token = _WHOLE.set(True)
  try:
    yield
  finally:
    _WHOLE.reset(token)


@contextlib.contextmanager
def read_on_ranks():
  """Within it, tables are split as in training but read-only, as global
  variables the graph's Saver restores."""
  token = _ON_RANKS.set(True)
  try:
    yield
  finally:
    _ON_RANKS.reset(token)


def reading_on_ranks():
  """Whether the graph being built reads its tables on the ranks."""
  return _ON_RANKS.get()


def training_graph():
  """Whether lookups in the graph being built may admit and update rows."""
  return not (_WHOLE.get() or _ON_RANKS.get())


def shard_collections():
  """A shard's collections: local in training (each rank saves its own,
  `shard_checkpoints`), global where only read."""
  return [tf.compat.v1.GraphKeys.GLOBAL_VARIABLES if _ON_RANKS.get()
          else tf.compat.v1.GraphKeys.LOCAL_VARIABLES]


def is_sharded(variable):
  """Whether `variable` is a shard of a table made by `sharded_embedding`."""
  return any(variable is v for v in
             tf.compat.v1.get_collection(COLLECTION))


def shard_range(vocabulary_size, num_shards, index):
  """(first row, rows) of shard `index`; the first `vocabulary_size %
  num_shards` shards hold one row more."""
  rows, larger = divmod(vocabulary_size, num_shards)
  return index * rows + min(index, larger), rows + (index < larger)


def _owners(ids, vocabulary_size, num_shards):
  """The shard holding each id (int32), as `shard_range` lays them out."""
  rows, larger = divmod(vocabulary_size, num_shards)
  boundary = larger * (rows + 1)  # the rows of the larger shards
  owner = tf.where(ids < boundary, ids // (rows + 1),
                   larger + (ids - boundary) // max(rows, 1))
  return tf.cast(owner, tf.int32)


def horovod():
  """horovod.tensorflow, as the backend initialised it, on one of several
  ranks; else None."""
  hvd = sys.modules.get("horovod.tensorflow")
  if hvd is None or not hvd.is_initialized():
    return None
  return hvd if hvd.size() > 1 else None


def _check_ids(ids, vocabulary_size, name):
  """(checks, flat int64 ids): an id outside the table has no owner and the
  exchange would not add up."""
  flat = tf.reshape(tf.cast(ids, tf.int64), [-1])
  return tf.debugging.assert_less(
      flat, tf.constant(vocabulary_size, tf.int64),
      message=f"sharded_embedding {name!r}: ids must be in [0, "
      f"{vocabulary_size})"), tf.debugging.assert_non_negative(
          flat, message=f"sharded_embedding {name!r}: ids must be >= 0"), flat


def _mean_over_ranks(vectors, num_ranks):
  """`vectors`, whose gradient is divided by the rank count on its way back."""

  @tf.custom_gradient
  def identity(x):
    # The rows' gradient arrives as IndexedSlices (from the gather that
    # reorders them); every row of it is sent back, so it goes dense.
    return tf.identity(x), lambda upstream: tf.convert_to_tensor(
        upstream) / num_ranks
  return identity(vectors)


def _send_rows(hvd, rows, splits, compression):
  """The second alltoall: `rows` back to the askers (fp16: both ways)."""
  if compression == "none":
    return hvd.alltoall(rows, splits=splits)[0]
  answered, _ = hvd.alltoall(tf.cast(rows, tf.float16), splits=splits)
  return tf.cast(answered, rows.dtype)


def _exchange(hvd, shard, ids, compression):
  """(unique ids, their vectors, the vectors of `ids`) through two alltoalls."""
  info = shard._save_slice_info  # pylint: disable=protected-access
  vocabulary_size, first_row = info.full_shape[0], info.var_offset[0]
  unique, positions = tf.unique(ids)
  owner = _owners(unique, vocabulary_size, hvd.size())
  order = tf.argsort(owner, stable=True)
  splits = tf.math.bincount(owner, minlength=hvd.size(), maxlength=hvd.size(),
                            dtype=tf.int32)
  asked, asked_splits = hvd.alltoall(tf.gather(unique, order), splits=splits)
  local = asked - first_row
  rows = tf.gather(shard, local)
  record_counts(local, lambda: hvd.alltoall(
      tf.gather(occurrences(positions, tf.size(unique)), order),
      splits=splits)[0] / hvd.size())
  answered = _send_rows(hvd, rows, asked_splits, compression)
  vectors = tf.gather(_mean_over_ranks(answered, hvd.size()),
                      tf.math.invert_permutation(order))
  return unique, vectors, tf.gather(vectors, positions)


def occurrences(positions, size):
  """Lookups per unique id (float32), from `tf.unique`'s positions."""
  return tf.math.unsorted_segment_sum(tf.ones_like(positions, tf.float32),
                                      positions, size)


def record_counts(rows, counts):
  """Notes that the gradient rows at `rows` sum `counts()` lookups each (a
  share of the ranks' mean), built only when CowClip asks for them."""
  graph_state.of(rows.graph).row_counts[rows.name] = counts


def counts_of(rows):
  """`record_counts`' counts of `rows` (built now), or None."""
  counts = graph_state.of(rows.graph).row_counts.get(rows.name)
  return None if counts is None else counts()


def check_sizes(vocabulary_size, dimension, name):
  """Raises ConfigError unless both are integers >= 1."""
  for argument, value in (("vocabulary_size", vocabulary_size),
                          ("dimension", dimension)):
    if not isinstance(value, numbers.Integral) or value < 1:
      raise errors.ConfigError(
          f"sharded table {name!r}: {argument}={value!r} must be an "
          "integer >= 1")


def check_compression(compression, name):
  """Raises ConfigError unless `compression` is one of `COMPRESSIONS`."""
  if compression not in choices.COMPRESSIONS:
    raise errors.ConfigError(
        f"sharded table {name!r}: compression={compression!r} is unknown; "
        f"valid: {', '.join(choices.COMPRESSIONS)}")


def make_table(name, vocabulary_size, dimension, initializer=None,
               dtype=tf.float32, getter=None):
  """A table's variable: this rank's shard under Horovod training, else whole.

  Args:
    name: the variable's name, in the current variable scope.
    vocabulary_size, dimension: the whole table's shape.
    initializer, dtype: as `sharded_embedding`'s.
    getter: makes the variable, with get_variable's arguments.

  Returns:
    The variable; a shard carries its place as save slice information.
  """
  check_sizes(vocabulary_size, dimension, name)
  full_shape = [vocabulary_size, dimension]
  initializer = initializer or tf.compat.v1.glorot_uniform_initializer()
  getter = getter or tf.compat.v1.get_variable
  hvd = None if _WHOLE.get() else horovod()
  if hvd is None:
    with precision.variables_as_stored():
      table = getter(name, shape=full_shape, dtype=dtype,
                     initializer=initializer)
    if not any(table is t for t in
               tf.compat.v1.get_collection(WHOLE_COLLECTION)):
      tf.compat.v1.add_to_collection(WHOLE_COLLECTION, table)
    return table
  if vocabulary_size < hvd.size():
    raise errors.ConfigError(
        f"sharded table {name!r}: vocabulary_size={vocabulary_size} "
        f"is smaller than the {hvd.size()} Horovod ranks; use a plain table")
  first_row, rows = shard_range(vocabulary_size, hvd.size(), hvd.rank())
  with precision.variables_as_stored():
    shard = getter(
        name, shape=[rows, dimension], dtype=dtype,
        initializer=initializers.part_initializer(initializer, full_shape,
                                                  first_row),
        collections=shard_collections() + [COLLECTION],
        trainable=True)
  # Saved as its slice of the whole table (its optimizer slots follow), so
  # a checkpoint restores into any number of ranks (shard_checkpoints.py).
  shard._set_save_slice_info(tf_variables.Variable.SaveSliceInfo(  # pylint: disable=protected-access
      shard.op.name, full_shape, [first_row, 0], [rows, dimension]))
  return shard


def lookup(table, ids, compression="none"):
  """The vectors of `ids` in `table`, a `make_table` variable (a collective
  for a shard: every rank, every batch).

  Args:
    table: the table's variable.
    ids, compression: as `sharded_embedding`'s.

  Returns:
    `ids.shape + [dimension]`, in the table's (or network's) dtype.
  """
  check_compression(compression, table.name)
  read_dtype = precision.network_dtype()
  if read_dtype is not None:  # as a read of any variable there
    return tf.cast(_lookup(table, ids, compression), read_dtype)
  return _lookup(table, ids, compression)


def _lookup(table, ids, compression):
  """`lookup`'s vectors, in the table's dtype."""
  if not is_sharded(table):
    return tf.nn.embedding_lookup(table, ids)
  name = table.op.name
  vocabulary_size, dimension = table._save_slice_info.full_shape  # pylint: disable=protected-access
  *checks, flat = _check_ids(ids, vocabulary_size, name)
  with tf.control_dependencies(checks):
    flat = tf.identity(flat)
  unique, vectors, looked_up = _exchange(horovod(), table, flat,
                                         compression)
  lookups().append(Lookup(table, unique, vectors))
  return tf.reshape(looked_up, tf.concat([tf.shape(ids), [dimension]], 0))


def sharded_embedding(ids, vocabulary_size, dimension, name="embedding",
                      initializer=None, dtype=tf.float32, compression="none"):
  """Looks `ids` up in a table whose rows are spread over the Horovod ranks.

  Every rank must call it for every batch: the lookup is a collective.

  Args:
    ids: integer ids in [0, vocabulary_size), any shape.
    vocabulary_size, dimension: the table's rows and the vectors' length.
    name: the table's variable name.
    initializer: an initializer or a function of (shape, dtype) (default
      glorot uniform over the whole shape).
    dtype: the table's dtype.
    compression: "none", or "fp16": vectors and gradients travel as float16
      (values beyond 65504 arrive as inf).

  Returns:
    The vectors, of shape `ids.shape + [dimension]`.
  """
  check_compression(compression, name)
  return lookup(make_table(name, vocabulary_size, dimension, initializer,
                           dtype), ids, compression)


def replica_squared_norm(grads, variables, shard_lookups, vector_grads):
  """||g||^2 of this replica's own gradient, sharded tables included.

  A shard's gradient sums every rank's; this rank's own is the gradient of
  the vectors it looked up, merged by id per table.

  Args:
    grads, variables: the gradients (None where absent) and variables.
    shard_lookups: `Lookup`s of this micro-batch.
    vector_grads: the gradient of each lookup's `vectors`.
  """
  own = [g for g, v in zip(grads, variables) if not is_sharded(v)]
  by_table = {}
  for lookup, grad in zip(shard_lookups, vector_grads):
    if grad is not None:
      by_table.setdefault(id(lookup.table), []).append((lookup.ids, grad))
  for parts in by_table.values():
    own.append(tf.IndexedSlices(
        tf.concat([tf.cast(g, tf.float32) for _, g in parts], 0),
        tf.concat([i for i, _ in parts], 0)))
  return gradients_lib.total_squared_norm(own)


def mean_squared_norm(mean, variables):
  """(mean without shard gradients, ||this rank's shard part||^2): summed
  over ranks, the parts give the whole mean's norm."""
  rest = [None if is_sharded(v) else g for g, v in zip(mean, variables)]
  shards = [g for g, v in zip(mean, variables) if is_sharded(v)]
  return rest, gradients_lib.total_squared_norm(shards)


def nonfinite_shards(grads, variables):
  """1.0 when this rank's shard gradients have a non-finite value, else 0.0;
  summed over ranks, since each rank's own finiteness check can't see it."""
  shards = [g for g, v in zip(grads, variables)
            if g is not None and is_sharded(v)]
  return tf.cast(tf.logical_not(gradients_lib.all_finite(shards)), tf.float32)


def keep_slots_local(optimizer, variables):
  """Moves the shards' slots to the local variables, so rank 0's broadcast
  does not overwrite them."""
  global_ref = tf.compat.v1.get_collection_ref(
      tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)
  for variable in variables:
    if not is_sharded(variable):
      continue
    for slot_name in optimizer.get_slot_names():
      slot = optimizer.get_slot(variable, slot_name)
      if slot is None:
        continue
      global_ref[:] = [v for v in global_ref if v is not slot]
      tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.LOCAL_VARIABLES,
                                     slot)

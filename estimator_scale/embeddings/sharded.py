"""Embedding tables sharded over Horovod ranks, looked up all-to-all.

Under Horovod every rank holds every variable whole, so a table is bounded
by one rank's memory, and every rank receives every rank's embedding rows
each update. `sharded_embedding` splits a table by rows instead: of N ranks,
rank r holds a contiguous range of rows, as equal as can be (the first
`rows % N` ranks one more), with their optimizer slots. Contiguous ranges rather than `id % N`: a range
is a slice of the whole table in TensorFlow's own terms (`SaveSliceInfo`),
so what a rank holds maps onto a checkpoint of the whole table whatever N
wrote it. Ids are best hashed or shuffled over the vocabulary: a range puts
neighbouring ids, often the frequent ones, on one rank.

A lookup runs in the forward pass, on every rank, in lockstep:
1. the batch's ids, each once (`tf.unique`), go to the ranks that own them
   (`hvd.alltoall` with one split per rank);
2. each rank gathers the rows asked of it and sends them back (the second
   alltoall, along the received splits);
3. the rows return to the batch's order.
The gradient flows back the same way (Horovod registers alltoall's gradient
as the alltoall in reverse), so each row's owner receives the sum of every
rank's gradient for it; the lookup divides it by N on the way, making it
the mean a replicated table's allreduce would give. The owner's optimizer
applies it with its sparse update. The reducer leaves these gradients out
of its allreduce (`is_sharded`), and their variables out of rank 0's
broadcast (the shard and its slots are local variables): each rank's rows
are its own.

AdaScale's per-replica norms need each rank's own gradient of the table,
which exists only before the exchange: the lookup records the unique rows'
vectors (`lookups`), whose gradient is that rank's gradient of the rows it
looked up, merged by row, as a replicated table's would be.

Outside Horovod, or on one rank, the table is one plain variable, and so
it is in evaluation, prediction and export graphs (`whole_tables`): under
Horovod the chief evaluates and exports alone, where a lookup needing every
rank would wait forever, and a SavedModel must hold the whole table to
serve. Those graphs restore it from the merged checkpoint of the shards
(`shard_checkpoints.WholeTablesSaver`).
"""
import contextlib
import contextvars
import dataclasses
import weakref

import tensorflow as tf
from tensorflow.python.ops import variable_scope as tf_variable_scope
from tensorflow.python.ops import variables as tf_variables

from estimator_scale import errors
from estimator_scale.backends.horovod import ranks
from estimator_scale.train_ops import gradients as gradients_lib

COLLECTION = "estimator_scale_sharded_tables"
"""Graph collection of the sharded tables' variables (this rank's shard)."""

WHOLE_COLLECTION = "estimator_scale_whole_tables"
"""Graph collection of the tables `sharded_embedding` made whole."""

_WHOLE = contextvars.ContextVar("estimator_scale_whole_tables", default=False)


@dataclasses.dataclass(frozen=True)
class Lookup:
  """One lookup of a sharded table, as AdaScale's norms need it.

  Attributes:
    table: the shard variable.
    ids: the unique ids looked up (int64, global row numbers).
    vectors: their rows, after the exchange; its gradient is this rank's
      own gradient of those rows.
  """
  table: tf.Variable
  ids: tf.Tensor
  vectors: tf.Tensor


_LOOKUPS = weakref.WeakKeyDictionary()  # graph -> [Lookup]


def lookups(graph=None):
  """The sharded-table lookups made in `graph` (default: the current one)."""
  graph = graph or tf.compat.v1.get_default_graph()
  return _LOOKUPS.setdefault(graph, [])


@contextlib.contextmanager
def whole_tables():
  """Within it, `sharded_embedding` makes each table one whole variable,
  whatever the number of ranks: the graphs one process runs alone
  (evaluation, prediction, export)."""
  token = _WHOLE.set(True)
  try:
    yield
  finally:
    _WHOLE.reset(token)


def is_sharded(variable):
  """Whether `variable` is a shard of a table made by `sharded_embedding`."""
  return any(variable is v for v in
             tf.compat.v1.get_collection(COLLECTION))


def shard_range(vocabulary_size, num_shards, index):
  """(first row, rows) of shard `index`: the first `vocabulary_size %
  num_shards` shards hold one row more than the others."""
  rows, larger = divmod(vocabulary_size, num_shards)
  return index * rows + min(index, larger), rows + (index < larger)


def _owners(ids, vocabulary_size, num_shards):
  """The shard holding each id (int32), as `shard_range` lays them out."""
  rows, larger = divmod(vocabulary_size, num_shards)
  boundary = larger * (rows + 1)  # the rows of the larger shards
  owner = tf.where(ids < boundary, ids // (rows + 1),
                   larger + (ids - boundary) // max(rows, 1))
  return tf.cast(owner, tf.int32)


def _horovod():
  """horovod.tensorflow when this process is one of several Horovod ranks."""
  if not ranks.launched():
    return None
  hvd = ranks.import_horovod()
  return hvd if hvd.is_initialized() and hvd.size() > 1 else None


def _part_initializer(initializer, full_shape, offset):
  """`initializer` drawing the part at row `offset` of the whole table.

  TensorFlow's v1 initializers take the part as `partition_info` (and
  variance-scaling ones keep the whole table's fans), Keras' as
  `partition_shape`/`partition_offset`; Keras' variance scaling would take
  its fans from the part's shape, so it becomes its v1 twin. A
  deterministic per-row initializer thus gives each rank exactly its rows
  of the replicated table; a random one draws the shard's own values, of
  the same distribution.
  """
  if isinstance(initializer, tf.keras.initializers.VarianceScaling):
    initializer = tf.compat.v1.variance_scaling_initializer(
        scale=initializer.scale, mode=initializer.mode,
        distribution=initializer.distribution, seed=initializer.seed)
  offsets = (offset,) + (0,) * (len(full_shape) - 1)
  if isinstance(initializer, tf.keras.initializers.Initializer):
    return lambda shape, dtype=None, partition_info=None: initializer(
        full_shape, dtype=dtype, partition_shape=shape,
        partition_offset=offsets)
  info = tf_variable_scope._PartitionInfo(  # pylint: disable=protected-access
      full_shape=list(full_shape), var_offset=list(offsets))
  return lambda shape, dtype=None, partition_info=None: initializer(
      shape, dtype=dtype, partition_info=info)


def _check_ids(ids, vocabulary_size, name):
  """The ids as a flat int64 vector, checked to lie in the table: an id
  outside it would have no owner, and the exchange would not add up."""
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


def _exchange(hvd, shard, ids, vocabulary_size, first_row):
  """(unique ids, their vectors, the vectors of `ids`) through two alltoalls."""
  unique, positions = tf.unique(ids)
  owner = _owners(unique, vocabulary_size, hvd.size())
  order = tf.argsort(owner, stable=True)
  splits = tf.math.bincount(owner, minlength=hvd.size(), maxlength=hvd.size(),
                            dtype=tf.int32)
  asked, asked_splits = hvd.alltoall(tf.gather(unique, order), splits=splits)
  rows = tf.gather(shard, asked - first_row)
  answered, _ = hvd.alltoall(rows, splits=asked_splits)
  vectors = tf.gather(_mean_over_ranks(answered, hvd.size()),
                      tf.math.invert_permutation(order))
  return unique, vectors, tf.gather(vectors, positions)


def sharded_embedding(ids, vocabulary_size, dimension, name="embedding",
                      initializer=None, dtype=tf.float32):
  """Looks `ids` up in a table whose rows are spread over the Horovod ranks.

  Call it where the network would call `tf.nn.embedding_lookup` (a model's
  `logits`, a hand-written model_fn); the table is made on first call with
  `tf.compat.v1.get_variable` in the current variable scope. Every rank must
  call it for every batch: the lookup is a collective.

  Args:
    ids: integer ids in [0, vocabulary_size), any shape.
    vocabulary_size: the table's rows.
    dimension: the vectors' length.
    name: the table's variable name.
    initializer: a v1 or Keras initializer (default: TensorFlow's
      get_variable default, glorot uniform over the whole table's shape).
    dtype: the table's dtype.

  Returns:
    The vectors, of shape `ids.shape + [dimension]`.
  """
  if vocabulary_size < 1 or dimension < 1:
    raise errors.ConfigError(
        f"sharded_embedding {name!r}: vocabulary_size={vocabulary_size} and "
        f"dimension={dimension} must be >= 1")
  full_shape = [vocabulary_size, dimension]
  initializer = initializer or tf.compat.v1.glorot_uniform_initializer()
  hvd = None if _WHOLE.get() else _horovod()
  if hvd is None:
    table = tf.compat.v1.get_variable(name, full_shape, dtype,
                                      initializer=initializer)
    if not any(table is t for t in
               tf.compat.v1.get_collection(WHOLE_COLLECTION)):
      tf.compat.v1.add_to_collection(WHOLE_COLLECTION, table)
    return tf.nn.embedding_lookup(table, ids)
  if vocabulary_size < hvd.size():
    raise errors.ConfigError(
        f"sharded_embedding {name!r}: vocabulary_size={vocabulary_size} "
        f"is smaller than the {hvd.size()} Horovod ranks; use a plain table")
  first_row, rows = shard_range(vocabulary_size, hvd.size(), hvd.rank())
  shard = tf.compat.v1.get_variable(
      name, [rows, dimension], dtype,
      initializer=_part_initializer(initializer, full_shape, first_row),
      collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES, COLLECTION],
      trainable=True)
  # Saved as its slice of the whole table (its optimizer slots follow), so
  # a checkpoint restores into any number of ranks (shard_checkpoints.py).
  shard._set_save_slice_info(tf_variables.Variable.SaveSliceInfo(  # pylint: disable=protected-access
      shard.op.name, full_shape, [first_row, 0], [rows, dimension]))
  *checks, flat = _check_ids(ids, vocabulary_size, name)
  with tf.control_dependencies(checks):
    flat = tf.identity(flat)
  unique, vectors, looked_up = _exchange(hvd, shard, flat, vocabulary_size,
                                         first_row)
  lookups().append(Lookup(shard, unique, vectors))
  return tf.reshape(looked_up, tf.concat([tf.shape(ids), [dimension]], 0))


def replica_squared_norm(grads, variables, shard_lookups, vector_grads):
  """||g||^2 of this replica's own gradient, sharded tables included.

  A shard's gradient holds every rank's contribution to its rows; this
  rank's own part of the whole table is the gradient of the vectors it
  looked up (`vector_grads`, one per lookup), merged by id over the lookups
  of the same table, as a replicated table's gradient would be.

  Args:
    grads: the gradients of `variables` (None where absent).
    variables: the trainable variables.
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
  """(mean with the shards' gradients left out, ||their part||^2 here).

  Each rank's shard gradient is its rows of the global mean; the whole
  mean's squared norm is the sum over ranks of this part and the rest's.
  """
  rest = [None if is_sharded(v) else g for g, v in zip(mean, variables)]
  shards = [g for g, v in zip(mean, variables) if is_sharded(v)]
  return rest, gradients_lib.total_squared_norm(shards)


def keep_slots_local(optimizer, variables):
  """Moves the shards' optimizer slots from the global to the local
  variables: like the shards, each rank's are its own, which rank 0's
  broadcast must not overwrite."""
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

"""Dynamic tables restored into another number of Horovod ranks.

An id's owner depends on the rank count, so after such a restore each
rank sends its rows, slots and bookkeeping to their new owners before the
first update, one per-row variable at a time to bound what is in flight;
an owner short of room keeps what `eviction` ranks first (with a
warning). The sketch, laid out by rank and holding no ids, restarts from
zero, also for one process restoring the ranks' checkpoint.
"""
import time

from absl import logging
import tensorflow as tf

from estimator_scale import graph_state
from estimator_scale.embeddings import dynamic

RANKS = "sharded_tables/ranks"
"""The merged checkpoint's tensor of the number of ranks that saved it."""

_FREE_VALUES = (("ids", dynamic.FREE), ("last_seen", dynamic.NEVER),
                ("counts", 0), ("fresh", False))
"""The table's bookkeeping per row, and what a free row holds."""

def ranks_saved(checkpoint):
  """Ranks that wrote `checkpoint`: its `RANKS`, else 1 for one process's
  checkpoint (with a global step), else None."""
  reader = tf.train.load_checkpoint(checkpoint)
  if reader.has_tensor(RANKS):
    return int(reader.get_tensor(RANKS))
  if reader.has_tensor(tf.compat.v1.GraphKeys.GLOBAL_STEP):
    return 1
  return None


def ranks_tensor(hvd):
  """{name: tensor} of the number of ranks, which rank 0 saves."""
  return {RANKS: tf.constant(hvd.size(), tf.int64)}


def _slots(table, sliced):
  """`table`'s pool slots among `sliced`: shaped as the whole pool, and
  named under it (v1) or recorded by `deltas.record_slots` (Keras)."""
  info = table.pool._save_slice_info  # pylint: disable=protected-access
  own = {v.ref() for v in [table.pool] + _bookkeeping(table)}
  graph = dynamic._outer_graph()  # pylint: disable=protected-access
  recorded = {slot.ref() for slot in graph_state.of(
      graph).recorded_slots.get(table.pool.ref(), ())}

  def named_under(v):
    return v._save_slice_info.full_name.startswith(info.full_name + "/")  # pylint: disable=protected-access
  return [v for v in sliced
          if v.ref() not in own and (v.ref() in recorded or named_under(v))
          and v._save_slice_info.full_shape == info.full_shape]  # pylint: disable=protected-access


def per_row(table, sliced):
  """`table`'s variables with a row per shard row: pool, slots, bookkeeping."""
  return [table.pool] + _slots(table, sliced) + _bookkeeping(table)


def _bookkeeping(table):
  """A dynamic table's per-row bookkeeping ([] for a `deltas.StaticTable`)."""
  return [getattr(table, name) for name, _ in _FREE_VALUES
          if hasattr(table, name)]


def _keep(table, received_ids, scores):
  """Positions of received rows to keep: all that fit, else the `rows` the
  eviction policy ranks first."""
  count = tf.size(received_ids)
  rows = table.rows

  def best():
    _, kept = tf.math.top_k(scores, k=rows)
    return tf.sort(kept)
  return tf.cond(count > rows, best, lambda: tf.range(count))


def _send(variable, held, splits, hvd):
  """The rows `held` of `variable` sent to their owners; what arrives."""
  rows = tf.gather(variable, held)
  if rows.dtype == tf.bool:  # as int32: not every Horovod build sends bool
    rows = tf.cast(rows, tf.int32)
  return hvd.alltoall(rows, splits=splits)[0]


def _move(table, slots, hvd):
  """(op moving `table`'s rows to their owners, rows evicted). Ids and the
  eviction score go first (they decide what is kept), then each variable,
  written before the next is read."""
  held = tf.where(table.ids >= 0)[:, 0]
  owner = dynamic.owners(tf.gather(table.ids, held), hvd.size())
  order = tf.argsort(owner, stable=True)
  held = tf.gather(held, order)
  splits = tf.math.bincount(owner, minlength=hvd.size(),
                            maxlength=hvd.size(), dtype=tf.int32)
  policy = "last_seen" if table.options.eviction == "lru" else "counts"
  first = {"ids": _send(table.ids, held, splits, hvd),
           policy: _send(getattr(table, policy), held, splits, hvd)}
  kept = _keep(table, first["ids"], first[policy])
  count = tf.size(kept)
  rows = tf.range(count)
  done = [kept]
  for variable in [table.pool] + slots:
    with tf.control_dependencies(done):
      values = tf.gather(_send(variable, held, splits, hvd), kept)
      done = [tf.compat.v1.scatter_update(variable, rows, values)]
  for name, free in _FREE_VALUES:
    variable = getattr(table, name)
    with tf.control_dependencies(done):
      values = first.get(name)
      if values is None:
        values = _send(variable, held, splits, hvd)
      values = tf.cast(tf.gather(values, kept), variable.dtype.base_dtype)
      done = [variable.assign(tf.concat([values, tf.fill(
          [table.rows - count], tf.constant(free, values.dtype))], 0))]
  evicted = tf.cast(tf.size(first["ids"]) - count, tf.int64)
  with tf.control_dependencies(done):
    done = [table.evicted.assign_add(evicted)]
    if table.sketch is not None:
      done.append(_cleared_sketch(table))
  with tf.control_dependencies(done):
    return tf.identity(evicted)


def _cleared_sketch(table):
  """The op zeroing `table`'s sketch (laid out for another number of ranks)."""
  return table.sketch.assign(tf.raw_ops.Empty(
      shape=table.sketch.shape.as_list(), dtype=tf.int32, init=True))


def restarting_sketches(scaffold, saved):
  """`scaffold` whose local_init_op also clears the sketches restored from
  `saved` ranks; it runs before Estimator's first checkpoint of the
  session, which says one process and so must hold cleared sketches."""
  logging.info("Sharded tables of %d ranks restored into one process",
               saved)
  clear = [_cleared_sketch(t) for t in dynamic.tables()
           if t.sketch is not None]
  if not clear:
    return scaffold
  local_init = scaffold.local_init_op
  if local_init is None:
    local_init = tf.compat.v1.train.Scaffold.default_local_init_op()
  return tf.compat.v1.train.Scaffold(
      local_init_op=tf.group(local_init, *clear), copy_from_scaffold=scaffold)


class Resharder:
  """Moves dynamic tables' rows to their owners after a restore saved by
  another number of ranks (`hvd`; `sliced`: tables and slots)."""

  def __init__(self, hvd, sliced):
    self._hvd = hvd
    self._tables = [t for t in dynamic.tables() if t.shard is not None]
    self._moves = [_move(t, _slots(t, sliced), hvd) for t in self._tables]

  def after_restore(self, session, checkpoint):
    """Re-shards when another number of ranks saved `checkpoint`; a
    collective, so every rank calls it."""
    if not self._moves:
      return
    saved = ranks_saved(checkpoint)
    if saved == self._hvd.size():
      return
    start = time.perf_counter()
    evicted = session.run(self._moves)
    if self._hvd.rank() == 0:
      logging.info("Dynamic tables re-sharded from %s to %d ranks in %.2f s",
                   saved or "an unknown number of", self._hvd.size(),
                   time.perf_counter() - start)
    for table, count in zip(self._tables, evicted):
      if count:
        logging.warning(
            "dynamic table %r: rank %d owns %d ids at %d ranks, more than "
            "its %d rows of capacity=%d; evicted the %d its eviction=%r "
            "ranks last", table.name, self._hvd.rank(), table.rows + count,
            self._hvd.size(), table.rows, table.options.capacity, count,
            table.options.eviction)

"""Delta saves of tables sharded over Horovod ranks, dynamic or static.

Between full saves each rank writes its changed rows (`deltas.Changes`)
under keys of its own and its other slices whole; rank 0 merges them into
`sharded_tables/deltas/<full step>/delta-<step>`. Rows carry whole-table
row numbers, so any number of ranks restores them; a session's first
save is full, so a chain never spans a change in the number of ranks.
"""
import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops  # pylint: disable=g-direct-tensorflow-import

from estimator_scale.embeddings import deltas
from estimator_scale.embeddings import dynamic
from estimator_scale.embeddings import dynamic_reshard
from estimator_scale.embeddings import sharded

def _positions(table):
  """The name of a table's changed rows' positions in a delta."""
  return deltas.whole_name(table.pool) + deltas.POSITIONS


def _key(name, rank):
  """A rank's rows of the whole variable `name` in a delta."""
  return tf.strings.join([name, "/_delta_rank", rank])


class RankDeltas:
  """Rank `hvd`'s ops saving its changed rows, applying a delta's (`sliced`)."""

  def __init__(self, hvd, sliced):
    tables = [t for t in dynamic.tables() if t.shard is not None] + [
        deltas.static_table(v)
        for v in tf.compat.v1.get_collection(sharded.COLLECTION)
        if dynamic.table_of(v) is None]
    self.per_row = {t.pool.ref(): dynamic_reshard.per_row(t, sliced)
                    for t in tables}
    rowed = {v.ref() for rows in self.per_row.values() for v in rows}
    self.whole = [v for v in sliced if v.ref() not in rowed]
    tracked = [t for t in tables if t.changes is not None]
    self.full_every = tracked[0].changes.full_every if tracked else 1
    self.prefix = tf.compat.v1.placeholder(tf.string, [])
    self.after = tf.compat.v1.placeholder(tf.int64, [])
    rank = str(hvd.rank())
    names, tensors = [], []
    if hvd.rank() == 0:
      names.append(deltas.AFTER)
      tensors.append(self.after)
      for name, tensor in dynamic_reshard.ranks_tensor(hvd).items():
        names.append(name)
        tensors.append(tensor)
    for table in tracked:
      changed = table.changes.changed()
      names.append(_key(_positions(table), rank))
      tensors.append(changed + table.first_row)
      for variable in self.per_row[table.pool.ref()]:
        names.append(_key(deltas.whole_name(variable), rank))
        tensors.append(tf.gather(variable, changed))
    self.save_rows = None
    if tracked:
      self.save_rows = tf.raw_ops.SaveV2(
          prefix=self.prefix, tensor_names=tf.stack(names),
          shape_and_slices=[""] * len(names), tensors=tensors)
    self.reset = tf.group(*[t.changes.reset() for t in tracked])
    self.source = tf.compat.v1.placeholder(tf.string, [])
    applied = []
    for table in tables:
      (positions,) = tf.raw_ops.RestoreV2(
          prefix=self.prefix,
          tensor_names=tf.reshape(_key(_positions(table), self.source),
                                  [1]),
          shape_and_slices=[""], dtypes=[tf.int64])
      mine = tf.where((positions >= table.first_row) &
                      (positions < table.first_row + table.rows))[:, 0]
      rows = tf.gather(positions, mine) - table.first_row
      for variable in self.per_row[table.pool.ref()]:
        (values,) = tf.raw_ops.RestoreV2(
            prefix=self.prefix,
            tensor_names=tf.reshape(
                _key(deltas.whole_name(variable), self.source), [1]),
            shape_and_slices=[""], dtypes=[variable.dtype.base_dtype])
        applied.append(resource_variable_ops.resource_scatter_update(
            variable.handle, rows, tf.gather(values, mine)))
    self.apply_rows = tf.group(*applied)

  def apply_rows_of(self, session, delta):
    """Applies every saving rank's rows of `delta` in this rank's range."""
    for rank in range(dynamic_reshard.ranks_saved(delta)):
      session.run(self.apply_rows, {self.prefix: delta,
                                    self.source: str(rank)})


def chain_to(directory, step):
  """(merged full save, its deltas) of the tables at `step`, or None."""
  root = tf.io.gfile.join(directory, deltas.DIRECTORY)
  if not tf.io.gfile.isdir(root):
    return None
  bases = sorted((int(name.rstrip("/")) for name in tf.io.gfile.listdir(root)
                  if name.rstrip("/").isdigit()), reverse=True)
  for base in bases:
    full = tf.io.gfile.join(directory, f"ckpt-{base}")
    if base >= step or not tf.io.gfile.exists(full + ".index"):
      continue
    follow = [(at, delta) for at, delta in deltas.chain(full) if at <= step]
    if follow and follow[-1][0] == step:
      return full, [delta for _, delta in follow]
  return None


def needed_fulls(directory, kept_steps):
  """Steps of the full checkpoints whose deltas reach one of `kept_steps`."""
  needed = set()
  for step in kept_steps:
    found = chain_to(directory, step)
    if found:
      needed.add(deltas.step_of(found[0]))
  return needed


def drop_chain(directory, base):
  """Removes the deltas that follow the full checkpoint of step `base`."""
  chain = tf.io.gfile.join(directory, deltas.DIRECTORY, str(base))
  if tf.io.gfile.isdir(chain):
    tf.io.gfile.rmtree(chain)

"""Saves that cost what changed: between two full checkpoints, a save writes
only the rows of the tables changed since the save before.

With `full_checkpoint_every` K > 1, one save in K is Estimator's full
checkpoint; the others are deltas `deltas/<full step>/delta-<step>`: each
table's changed rows (a dynamic table's looked up or freed, a static one's
given sparse gradients: `Changes`), named as one process's table has them,
and every other variable whole. Invariants: a session's last save is
full, so readers of the latest checkpoint see a whole one; a delta names
the save it follows and is renamed into place index last; a restore stops
at the first delta that does not follow, and deletes those past it
(another timeline would continue their chain). Ranks: `shard_deltas`.
"""
import contextlib
import contextvars
import dataclasses
import numbers
import os
import re
from typing import Any

from absl import logging
import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.training.saving import saveable_object_util  # pylint: disable=g-direct-tensorflow-import

from estimator_scale import errors
from estimator_scale import graph_state
from estimator_scale.embeddings import saving

DIRECTORY = "deltas"
AFTER = "_delta_after"
"""The step of the save a delta follows."""
POSITIONS = "/_delta_positions"
_DELTA = re.compile(r"((?:tmp-)?delta-(\d+))(?:\.index$|[.-])")

_TRACKING = contextvars.ContextVar("estimator_scale_tracking_changes",
                                   default=0)
"""The saves per full checkpoint of the graph being built; 0: untracked."""


@contextlib.contextmanager
def tracking(full_every):
  """Lookups mark their rows (`Changes`); 1 in `full_every` saves is full."""
  token = _TRACKING.set(full_every)
  try:
    yield
  finally:
    _TRACKING.reset(token)


def tracking_on():
  """Whether the graph being built tracks its tables' changed rows."""
  return bool(_TRACKING.get())


# An optimizer class's attribute: whether its sparse update moves only the
# rows of the gradient; unset, the classes in `_ROW_BY_ROW` do.
ROWS_ONLY = "updates_looked_up_rows_only"
_ROW_BY_ROW = (tf.compat.v1.train.GradientDescentOptimizer,
               tf.compat.v1.train.MomentumOptimizer,
               tf.compat.v1.train.AdagradOptimizer,
               tf.compat.v1.train.FtrlOptimizer,
               tf.keras.optimizers.legacy.SGD,
               tf.keras.optimizers.legacy.Adagrad,
               tf.keras.optimizers.legacy.Ftrl)


def check_optimizer(optimizer, table):
  """Raises ConfigError where `optimizer` moves rows no delta would hold."""
  if getattr(optimizer, ROWS_ONLY, isinstance(optimizer, _ROW_BY_ROW)):
    return
  raise errors.ConfigError(
      f"table {table!r}: full_checkpoint_every > 1 saves the rows looked up "
      f"since the save before, but optimizer {type(optimizer).__name__} "
      "moves every row of the table at each update; train the table with "
      "sgd, momentum, adagrad, ftrl or lazy_adam, or use "
      "full_checkpoint_every=1")


class Changes:
  """The rows of `table` changed since the last save (with a dynamic table's
  `ids`, -1 where a row is free: also those freed)."""

  def __init__(self, table, ids=None):
    self._ids = ids
    self.full_every = _TRACKING.get()
    rows = table.shape[0]
    local = [tf.compat.v1.GraphKeys.LOCAL_VARIABLES]
    name = table.op.name
    # Beside the table's rows: a parameter server's part marks its own.
    with tf.init_scope(), tf.compat.v1.device(table.device):
      self.touched = tf.compat.v1.Variable(
          tf.zeros([rows], tf.bool), trainable=False, collections=local,
          name=f"{name}_touched")
      if ids is None:
        return
      # Initialised after the restore, as local variables are; a Horovod
      # rank's ids are local too, initialised beside it and restored after
      # (`reset` then).
      held = tf.zeros([rows], tf.bool) if _is_local(ids) else (
          lambda: tf.greater_equal(ids.read_value(), 0))
      self.held = tf.compat.v1.Variable(
          held, trainable=False, collections=local, name=f"{name}_held")

  def mark(self, rows):
    """The op marking `rows` (a gradient's, or a lookup's) as touched."""
    if self._ids is not None:  # a dynamic table's lookup: -1 where no row
      rows = tf.boolean_mask(rows, rows >= 0)
    return self.touched.scatter_update(tf.IndexedSlices(
        tf.ones_like(rows, tf.bool), rows))

  def changed(self):
    """The positions of the rows changed since the last save."""
    if self._ids is None:
      return tf.where(self.touched)[:, 0]
    freed = tf.logical_and(self.held, self._ids < 0)
    return tf.where(tf.logical_or(self.touched, freed))[:, 0]

  def reset(self):
    """The op that makes the current state the saved one."""
    cleared = self.touched.assign(tf.zeros_like(self.touched))
    if self._ids is None:
      return cleared
    return tf.group(cleared, self.held.assign(self._ids >= 0))


@dataclasses.dataclass
class StaticTable:
  """A variable of sparse updates (or its ps part), as `DeltaSaver` takes."""
  pool: Any
  first_row: int
  rows: int
  changes: Changes
  sketch: Any = None


def static_table(variable):
  """`variable` as a `StaticTable`, tracked where `mark_static` marks it."""
  tracked = graph_state.of(variable.graph).static_tables.get(variable.ref())
  info = variable._save_slice_info  # pylint: disable=protected-access
  return tracked or StaticTable(variable, info.var_offset[0] if info else 0,
                                variable.shape[0], None)


def mark_static(optimizer, variable, indices):
  """Ops marking rows `indices` of `variable` changed; [] if untracked."""
  if not tracking_on():
    return []
  tracked = graph_state.of(variable.graph).static_tables
  if variable.ref() not in tracked:
    check_optimizer(optimizer, whole_name(variable))
    record_slots(variable, [optimizer.get_slot(variable, name)
                            for name in optimizer.get_slot_names()])
    tracked[variable.ref()] = dataclasses.replace(
        static_table(variable), changes=Changes(variable))
  return [tracked[variable.ref()].changes.mark(tf.reshape(indices, [-1]))]


def static_tables():
  """The static tables whose changed rows this graph's deltas save."""
  return list(graph_state.of(
      tf.compat.v1.get_default_graph()).static_tables.values())


def _is_local(variable):
  return any(variable is v for v in tf.compat.v1.local_variables())


def record_slots(table, slots):
  """Records `slots` as the optimizer's of `table` (a variable): a Keras
  optimizer names them under its own scope, where `_per_row` can't see."""
  recorded = graph_state.of(table.graph).recorded_slots.setdefault(
      table.ref(), [])
  recorded += [s for s in slots
               if s is not None and not any(s is r for r in recorded)]


def _per_row(table, variables):
  """The pool, its recorded slots and variables under it, a row per row."""
  prefix = table.pool.op.name + "/"
  rows = table.pool.shape[0]
  recorded = graph_state.of(table.pool.graph).recorded_slots.get(
      table.pool.ref(), [])
  return [table.pool] + recorded + [
      v for v in variables
      if v.op.name.startswith(prefix) and v is not table.sketch
      and v.shape.rank and v.shape[0] == rows
      and not any(v is r for r in recorded)]


def whole_name(variable):
  """The whole variable's name in a checkpoint (`variable` or its whole)."""
  info = variable._save_slice_info  # pylint: disable=protected-access
  return info.full_name if info else variable.op.name


def step_of(path):
  """The step of a checkpoint or a delta (a path prefix ending in it)."""
  return int(path.rpartition("-")[2])


class DeltaSaver:
  """Estimator's training Saver: one full checkpoint in `full_every` saves,
  deltas in between; the rest is the wrapped `saver`'s.

  Args:
    saver: the Saver the training graph would use.
    tables: (table, its `Changes`) of the dynamic tables (one per ps part).
    full_every: saves per full checkpoint.
  """

  def __init__(self, saver, tables, full_every):
    self._saver = saver
    self._tables = tables
    self._full_every = full_every
    self._ops = None
    self._base = None  # the full checkpoint's step the deltas follow
    self._last = None  # the step of the last save (or of the restore)
    self._since_full = 0

  def __getattr__(self, name):
    return getattr(self._saver, name)

  def build(self):
    """Builds the wrapped Saver and the ops of a delta's save and apply."""
    self._saver.build()
    if self._ops is not None:
      return
    variables = tf.compat.v1.global_variables()
    by_table = {}  # a table split over ps tasks is saved as one
    for table, changes in self._tables:
      by_table.setdefault(whole_name(table.pool), []).append(
          (table, changes,
           {whole_name(v): v for v in _per_row(table, variables)}))
    per_row = {name for parts in by_table.values()
               for _, _, rows in parts for name in rows}
    saveables = saveable_object_util.op_list_to_dict(
        variables + tf.compat.v1.get_collection(
            tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS))
    rest = {k: v for k, v in saveables.items() if k not in per_row}
    prefix = tf.compat.v1.placeholder(tf.string, [], name="delta_prefix")
    after = tf.compat.v1.placeholder(tf.int64, [], name="delta_after")
    names, tensors, applied = [AFTER], [after], []
    for pool, parts in by_table.items():
      changed = [changes.changed() for _, changes, _ in parts]
      names.append(pool + POSITIONS)
      tensors.append(tf.concat([c + table.first_row for c, (table, _, _)
                                in zip(changed, parts)], 0))
      (read,) = tf.raw_ops.RestoreV2(
          prefix=prefix, tensor_names=[pool + POSITIONS],
          shape_and_slices=[""], dtypes=[tf.int64])
      for name, variable in parts[0][2].items():
        names.append(name)
        tensors.append(tf.concat([tf.gather(rows[name], c) for c, (_, _, rows)
                                  in zip(changed, parts)], 0))
        (values,) = tf.raw_ops.RestoreV2(
            prefix=prefix, tensor_names=[name], shape_and_slices=[""],
            dtypes=[variable.dtype.base_dtype])
        for table, _, rows in parts:  # each part its own rows
          mine = tf.where((read >= table.first_row) &
                          (read < table.first_row + table.rows))[:, 0]
          applied.append(resource_variable_ops.resource_scatter_update(
              rows[name].handle, tf.gather(read, mine) - table.first_row,
              tf.gather(values, mine)))
    parts = tf.compat.v1.placeholder(tf.string, [None], name="delta_parts")
    self._ops = dict(
        prefix=prefix, after=after, parts=parts,
        save_rows=tf.raw_ops.SaveV2(
            prefix=prefix, tensor_names=names,
            shape_and_slices=[""] * len(names), tensors=tensors),
        apply_rows=tf.group(*applied),
        merge=tf.raw_ops.MergeV2Checkpoints(
            checkpoint_prefixes=parts, destination_prefix=prefix,
            delete_old_dirs=False),
        reset=tf.group(*[changes.reset() for _, changes in self._tables]),
        rest=tf.compat.v1.train.Saver(var_list=rest, name="delta_rest"))

  def save(self, sess, save_path, global_step=None, **kwargs):
    """See tf.compat.v1.train.Saver.save: a full checkpoint or a delta."""
    step = int(global_step if isinstance(global_step, numbers.Integral)
               else tf.compat.v1.train.global_step(sess, global_step))
    if step == self._last:
      return None  # saved (or restored) at this step already
    if self._base is None or self._since_full + 1 >= self._full_every:
      return self.save_full(sess, save_path, step, **kwargs)
    directory = os.path.join(os.path.dirname(save_path), DIRECTORY,
                             str(self._base))
    tf.io.gfile.makedirs(directory)
    aside = os.path.join(directory, f"tmp-delta-{step}")
    ops = self._ops
    sess.run(ops["save_rows"], {ops["prefix"]: aside + "-rows",
                                ops["after"]: self._last})
    ops["rest"].save(sess, aside + "-rest", write_meta_graph=False,
                     write_state=False)
    sess.run(ops["merge"], {ops["parts"]: [aside + "-rows", aside + "-rest"],
                            ops["prefix"]: aside})
    saving.publish(aside, os.path.join(directory,
                                                  f"delta-{step}"))
    sess.run(ops["reset"])
    self._last, self._since_full = step, self._since_full + 1
    return save_path

  def save_full(self, sess, save_path, step, **kwargs):
    """A full checkpoint at `step`; drops deltas of dropped full checkpoints."""
    path = self._saver.save(sess, save_path, global_step=step, **kwargs)
    sess.run(self._ops["reset"])
    self._base, self._last, self._since_full = step, step, 0
    _drop_orphans(os.path.dirname(save_path))
    return path

  def save_full_unless_done(self, sess, save_path):
    """A full checkpoint at the current step, unless one was saved there."""
    step = int(sess.run(tf.compat.v1.train.get_global_step()))
    if step != self._base:
      self.save_full(sess, save_path, step)

  def restore(self, sess, save_path):
    """See base class: the full checkpoint, then its deltas in order."""
    result = self._saver.restore(sess, save_path)
    if save_path is None:
      return result
    base = step_of(save_path)
    ops, at = self._ops, base
    follow = chain(save_path)
    for at, delta in follow:
      ops["rest"].restore(sess, delta)
      sess.run(ops["apply_rows"], {ops["prefix"]: delta})
    # Past the chain, or written aside: no save may continue them.
    directory = _directory(save_path)
    for step, delta in _deltas(directory, including_aside=True):
      if step > at or os.path.basename(delta).startswith("tmp-"):
        for path in tf.io.gfile.glob(delta + "*"):
          tf.io.gfile.remove(path)
    if follow:
      logging.info("restored %s and %d delta(s) after it, to step %d",
                   save_path, len(follow), at)
    self._base, self._last, self._since_full = base, at, len(follow)
    return result


def follow_latest(model_dir):
  """Whether deltas follow the latest checkpoint in `model_dir`."""
  latest = tf.train.latest_checkpoint(model_dir) if model_dir else None
  return bool(latest and chain(latest))


def _directory(checkpoint):
  """Where the deltas that follow the full `checkpoint` are."""
  return os.path.join(os.path.dirname(checkpoint), DIRECTORY,
                      str(step_of(checkpoint)))


def chain(checkpoint):
  """(step, prefix) of the unbroken chain of deltas after full `checkpoint`."""
  at, found = step_of(checkpoint), []
  for step, delta in _deltas(_directory(checkpoint)):
    if step <= at:
      continue
    if (not tf.io.gfile.exists(delta + ".index") or int(
        tf.train.load_variable(delta, AFTER)) != at):
      break
    at = step
    found.append((step, delta))
  return found


def _deltas(directory, including_aside=False):
  """(step, prefix) of the deltas in `directory`, by step; with
  `including_aside`, also those written aside and never renamed."""
  found = set()
  for path in tf.io.gfile.glob(os.path.join(directory, "*delta-*")):
    name = os.path.basename(path)
    match = _DELTA.match(name)
    if match and (including_aside or name.startswith("delta-")):
      found.add((int(match.group(2)),
                 os.path.join(directory, match.group(1))))
  return sorted(found)


def _drop_orphans(model_dir):
  """Removes the deltas of full checkpoints no longer in `model_dir`."""
  root = os.path.join(model_dir, DIRECTORY)
  if not tf.io.gfile.isdir(root):
    return
  for base in tf.io.gfile.listdir(root):
    base = base.rstrip("/")
    if not tf.io.gfile.exists(os.path.join(model_dir,
                                           f"model.ckpt-{base}.index")):
      tf.io.gfile.rmtree(os.path.join(root, base))


class FullSaveAtEnd(tf.compat.v1.train.SessionRunHook):
  """Makes a session's last save full: readers after training find it whole."""

  def __init__(self, saver, model_dir):
    self._saver, self._model_dir = saver, model_dir

  def end(self, session):
    self._saver.save_full_unless_done(
        session, os.path.join(self._model_dir, "model.ckpt"))

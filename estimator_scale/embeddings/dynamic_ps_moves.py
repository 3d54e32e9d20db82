"""A dynamic table restored into another number of ps tasks: rows moved to
the tasks their ids' hash names, before the first update.

As its session starts the chief reads every part's per-row variables
(holding the whole table once) and writes into each the rows whose ids it
now owns (too many: the most recently used stay, with a warning); the
sketch restarts (laid out by task, it holds no ids). Synchronous workers
look up through the chief; an asynchronous one looking up first fails
naming the table (`dynamic_ps.Part.check_owned`) and must be restarted.
"""
from absl import logging
import tensorflow as tf

from estimator_scale.embeddings import dynamic

_FREE = {"ids": dynamic.FREE, "last_seen": dynamic.NEVER}
"""A free row's value of each per-row variable; 0 (or False) otherwise."""


def per_row_variables(part):
  """{suffix: variable} of a part's per-row variables ("" for the rows, the
  bookkeeping, and each slot: global variables named under the rows)."""
  prefix = part.pool.op.name
  found = {"": part.pool}
  for variable in tf.compat.v1.global_variables():
    name = variable.op.name
    if (name.startswith(prefix + "/") and not name.endswith("/sketch")
        and variable.shape.rank and variable.shape[0] == part.rows):
      found[name[len(prefix) + 1:]] = variable
  return found


def _moves(table):
  """(misplaced ids, op moving every row to its owner, ids dropped for want
  of room) of a PsTable."""
  parts = table.parts
  families = [per_row_variables(part) for part in parts]
  names = sorted(set.intersection(*[set(f) for f in families]))
  whole = {name: tf.concat([f[name] for f in families], 0) for name in names}
  held = tf.where(whole["ids"] >= 0)[:, 0]
  owner = dynamic.owners(tf.gather(whole["ids"], held), len(parts))
  layout = tf.concat([tf.fill([part.rows], i) for i, part in enumerate(parts)],
                     0)
  misplaced = tf.math.count_nonzero(
      tf.not_equal(owner, tf.gather(layout, held)))
  writes, dropped = [], []
  for task, (part, family) in enumerate(zip(parts, families)):
    mine = tf.boolean_mask(held, tf.equal(owner, task))
    # The most recently used first, when a task's share is too small.
    recent = tf.argsort(-tf.gather(whole["last_seen"], mine), stable=True)
    keep = tf.gather(mine, recent)[:part.rows]
    dropped.append(tf.size(mine) - tf.size(keep))
    free = part.rows - tf.size(keep)
    for name in names:
      variable = family[name]
      fill = tf.cast(_FREE.get(name, 0), variable.dtype.base_dtype)
      shape = tf.concat([[free], tf.shape(variable)[1:]], 0)
      writes.append(variable.assign(tf.concat(
          [tf.gather(whole[name], keep), tf.fill(shape, fill)], 0)))
    if part.sketch is not None:
      writes.append(part.sketch.assign(tf.zeros_like(part.sketch)))
  return misplaced, tf.group(writes), tf.add_n(dropped)


class MoveHook(tf.compat.v1.train.SessionRunHook):
  """On the chief, moves `tables`' (`dynamic_ps.PsTable`s) misplaced rows as
  the session starts; `ps_tasks` is for the log line."""

  def __init__(self, tables, ps_tasks):
    self._tables = tables
    self._ps_tasks = ps_tasks
    self._moves = None

  def begin(self):
    self._moves = [(table.whole,) + _moves(table) for table in self._tables]

  def after_create_session(self, session, coord):
    del coord
    for name, misplaced, move, dropped in self._moves:
      if session.run(misplaced):
        lost = session.run([move, dropped])[1]
        logging.info("Dynamic table %s moved onto %d ps tasks: each row on "
                     "its id's task", name, self._ps_tasks)
        if lost:
          logging.warning(
              "Dynamic table %s: %d ids found no room on their new ps task "
              "and were evicted (the least recently used of their task)",
              name, lost)

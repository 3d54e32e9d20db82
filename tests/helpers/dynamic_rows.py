"""A dynamic table's rows as the Horovod ranks hold them, id by id.

A rank's dump of a dynamic table (its part of the pool, slots and per-row
variables, as a worker's hook fetched them) is laid out by row, and rows
move between ranks when their count changes; tests compare tables by the
id each row holds instead.
"""
import numpy as np
import tensorflow as tf

from estimator_scale.embeddings import dynamic


def by_id(dumps, table):
  """{name: {id: row}} of `table`'s per-row variables over the ranks'
  `dumps` (one dict of arrays per rank, in rank order), after checking
  that each rank holds only ids it owns and no id is held twice.

  The count-min sketch (`<table>/sketch`) is left out: its counters are
  laid out by rank and hold no ids.
  """
  rows, held_rows = {}, 0
  for rank, dump in enumerate(dumps):
    ids = dump[table + "/ids"]
    held = np.flatnonzero(ids >= 0)
    owner = dynamic.owners(tf.constant(ids[held]), len(dumps)).numpy()
    np.testing.assert_array_equal(
        owner, rank, err_msg=f"rank {rank} holds ids it does not own")
    held_rows += len(held)
    for name, value in dump.items():
      if ((name == table or name.startswith(table + "/"))
          and not name.endswith("/sketch")):
        rows.setdefault(name, {}).update(
            {int(ids[r]): value[r] for r in held})
  assert held_rows == len(rows[table + "/ids"]), "an id on two ranks"
  return rows


def assert_same(rows, expected, atol, message=""):
  """Raises unless `rows` and `expected` ({name: {id: row}}) hold the same
  ids, each with the same rows of every variable to `atol`."""
  assert set(rows) == set(expected), message
  for name, values in expected.items():
    assert set(rows[name]) == set(values), f"{message} {name}: other ids"
    for key, value in values.items():
      np.testing.assert_allclose(rows[name][key], value, atol=atol,
                                 err_msg=f"{message} {name} {key}")

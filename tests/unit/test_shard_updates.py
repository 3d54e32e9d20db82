"""Adam's block-by-block update of a shard, or of a part of a table split
over ps tasks, is v1 Adam's sparse update."""
import contextlib

import numpy as np
import tensorflow as tf
from tensorflow.python.ops import variables as tf_variables  # pylint: disable=g-direct-tensorflow-import

from estimator_scale.embeddings import partitioning
from estimator_scale.embeddings import shard_updates
from estimator_scale.embeddings import sharded
from estimator_scale.train_ops import optimizers


def _train(in_blocks, rows=70, steps=3):
  """(table, m, v) after `steps` Adam updates with repeated ids; the table
  a shard when `in_blocks`."""
  rng = np.random.RandomState(0)
  with tf.Graph().as_default():
    collections = [tf.compat.v1.GraphKeys.GLOBAL_VARIABLES]
    if in_blocks:
      collections.append(sharded.COLLECTION)
    table = tf.compat.v1.get_variable(
        "table", initializer=rng.normal(size=(rows, 3)).astype(np.float32),
        collections=collections)
    if in_blocks:  # the second shard of a table of 2 x rows rows
      table._set_save_slice_info(tf_variables.Variable.SaveSliceInfo(  # pylint: disable=protected-access
          "table", [2 * rows, 3], [rows, 0], [rows, 3]))
    ids = tf.constant([4, 69, 4, 31, 0])
    loss = tf.reduce_sum(tf.sin(tf.gather(table, ids)) *
                         tf.range(1.0, 6.0)[:, None])
    optimizer = tf.compat.v1.train.AdamOptimizer(0.05)
    shard_updates.update_in_blocks(optimizer)
    shard_updates.update_in_blocks(optimizer)  # once is enough
    update = optimizer.minimize(loss, var_list=[table])
    loops = [op for op in tf.compat.v1.get_default_graph().get_operations()
             if op.type == "While"]
    assert len(loops) == (2 if in_blocks else 0)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      for _ in range(steps):
        sess.run(update)
      return sess.run([table, optimizer.get_slot(table, "m"),
                       optimizer.get_slot(table, "v")])


def test_adam_in_blocks_equals_v1_adams_sparse_update(monkeypatch):
  """Blocks of 16 rows over 70: the last block is short; every row moves
  (Adam moves rows without gradient by their slots), as v1 Adam's do."""
  monkeypatch.setattr(shard_updates, "BLOCK_ROWS", 16)
  whole = _train(in_blocks=False)
  blocks = _train(in_blocks=True)
  for expected, got in zip(whole, blocks):
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-7)
  untouched = np.setdiff1d(np.arange(70), [0, 4, 31, 69])
  assert np.all(np.abs(whole[1][untouched]) == 0)  # m of untouched rows
  assert np.any(whole[1] != 0)


def _train_split(split, steps=3):
  """(table, m, v) after `steps` Adam updates of a 70-row table, made in 3
  parts (as over 3 ps tasks) with the registry's Adam when `split`, else
  whole with TensorFlow's own."""
  initial = np.random.RandomState(1).normal(size=(70, 3)).astype(np.float32)
  with tf.Graph().as_default() as graph:
    with (partitioning.partitioned_variables(3, min_slice_bytes=100) if split
          else contextlib.nullcontext()):
      table = tf.compat.v1.get_variable(
          "table", [70, 3], initializer=tf.constant_initializer(initial))
      ids = tf.constant([4, 69, 4, 31, 0, 30])
      loss = tf.reduce_sum(tf.sin(tf.nn.embedding_lookup(table, ids)) *
                           tf.range(1.0, 7.0)[:, None])
      optimizer = (optimizers.make_optimizer("adam", 0.05) if split else
                   tf.compat.v1.train.AdamOptimizer(0.05))
      update = optimizer.minimize(loss)
    slices = list(table) if split else [table]
    loops = [op for op in graph.get_operations() if op.type == "While"]
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      for _ in range(steps):
        sess.run(update)
      got = [np.concatenate(sess.run(
          [v if slot is None else optimizer.get_slot(v, slot)
           for v in slices])) for slot in (None, "m", "v")]
  return got, len(slices), loops


def test_adam_updates_the_parts_of_a_split_table_in_blocks(monkeypatch):
  """A ps task updates all of its parts in one update: each in blocks (two
  loops per part), one part after another (the first loop of each waits
  for the one before), equal to v1 Adam's update of the whole."""
  monkeypatch.setattr(shard_updates, "BLOCK_ROWS", 16)
  whole, _, _ = _train_split(split=False)
  split, parts, loops = _train_split(split=True)
  assert parts == 3 and len(loops) == 2 * parts, loops
  waits = [{c.name for t in loop.inputs for c in t.op.control_inputs}
           for loop in loops[::2]]  # what each part's first loop waits for
  assert waits == [set()] + [{f"Adam/update_table/part_{part}/group_deps"}
                             for part in range(parts - 1)], waits
  for expected, got in zip(whole, split):
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-7)

"""Adam's block-by-block update of a shard is v1 Adam's sparse update."""
import numpy as np
import tensorflow as tf

from estimator_scale.embeddings import shard_updates
from estimator_scale.embeddings import sharded


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
    ids = tf.constant([4, 69, 4, 31, 0])
    loss = tf.reduce_sum(tf.sin(tf.gather(table, ids)) *
                         tf.range(1.0, 6.0)[:, None])
    optimizer = tf.compat.v1.train.AdamOptimizer(0.05)
    shard_updates.update_in_blocks(optimizer)
    shard_updates.update_in_blocks(optimizer)  # once is enough
    update = optimizer.minimize(loss, var_list=[table])
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

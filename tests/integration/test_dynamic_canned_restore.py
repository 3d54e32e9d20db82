"""A canned DNNClassifier over dynamic embedding columns resumed across
one process and Horovod ranks: one process's checkpoint onto 2 ranks, and
2 ranks' onto 3 and then onto one process.

Every process count reads its share of one process's batches, so a resumed
job trains as one process trained straight through: its predictions, and
every id's row and Adagrad accumulator, must be one process's to
TOLERANCE. A slot left behind at the resume (saved under one name, looked
for under another), restarted, or not moved with its id to the id's new
owner would move the updates after it away from one process's.
"""
import shutil

import numpy as np
import tensorflow as tf

from estimator_scale.embeddings import dynamic
from estimator_scale.embeddings import sharded
from tests.helpers import dynamic_canned as canned

TOLERANCE = 1e-5
SLOT = "training/Adagrad/{}/accumulator"
"""Where one process and ranks alike save a table's accumulator."""


def _on(root, processes, steps):
  """Trains the worker in `root` to `steps` on `processes`; its log."""
  log = canned.train(root, processes, steps)
  return log.stdout + log.stderr


def _rows(checkpoint, key):
  """{id: (row number, vector, accumulator)} of column `key`'s table."""
  reader = tf.train.load_checkpoint(checkpoint)
  table = canned.TABLE.format(key)
  ids = reader.get_tensor(f"{table}/ids")
  vectors = reader.get_tensor(table)
  slot = reader.get_tensor(SLOT.format(table))
  return {int(ids[r]): (r, vectors[r], slot[r])
          for r in np.flatnonzero(ids >= 0)}


def _one(tmp_path_factory):
  """The root of one process trained straight through, once a session
  (test_dynamic_canned_horovod.py compares with it too); a test asks
  after its own chain, so that its worker trains while another trains
  this."""
  return canned.trained(tmp_path_factory, 1, 200)


def _chain(root, chain):
  """Each run's log of the (processes, steps) of `chain`, one after the
  other in `root`."""
  return [_on(root, n, steps) for n, steps in chain]


def _assert_as_one_process(one, root, checkpoint):
  alone = canned.result(one)
  resumed = canned.result(root)
  assert resumed["global_step"] == 200
  np.testing.assert_allclose(resumed["predicted"], alone["predicted"],
                             atol=TOLERANCE)
  for key in canned.CAPACITY:
    want = _rows(str(one / "model" / "model.ckpt-200"), key)
    got = _rows(str(root / "model" / checkpoint), key)
    assert set(got) == set(want) and len(want) == canned.EXAMPLES
    for i, (_, vector, slot) in want.items():
      np.testing.assert_allclose(got[i][1], vector, atol=TOLERANCE)
      np.testing.assert_allclose(got[i][2], slot, atol=TOLERANCE)


def test_one_processs_checkpoint_resumes_on_two_ranks(tmp_path,
                                                      tmp_path_factory):
  logs = _chain(tmp_path, [(1, 100), (2, 200)])
  assert "Dynamic tables re-sharded from 1 to 2 ranks" in logs[1]
  _assert_as_one_process(_one(tmp_path_factory), tmp_path,
                         "sharded_tables/ckpt-200")


def test_two_ranks_checkpoint_resumes_on_three_then_one_process(
    tmp_path, tmp_path_factory):
  # 2 ranks' first 100 updates, as test_dynamic_canned_horovod.py's ranks
  # train them: once a session, copied.
  root = tmp_path / "chain"
  shutil.copytree(canned.trained(tmp_path_factory, 2, 100), root)
  logs = _chain(root, [(3, 150), (1, 200)])
  assert "Dynamic tables re-sharded from 2 to 3 ranks" in logs[0]
  assert "Sharded tables of 3 ranks restored into one process" in logs[1]
  _assert_as_one_process(_one(tmp_path_factory), root, "model.ckpt-200")
  for key in canned.CAPACITY:
    rows = _rows(str(root / "model" / "sharded_tables" / "ckpt-150"), key)
    ids = sorted(rows)
    owner = dynamic.owners(tf.constant(ids, tf.int64), 3).numpy()
    for rank in range(3):
      first, count = sharded.shard_range(canned.CAPACITY[key], 3, rank)
      held = [i for i in ids if first <= rows[i][0] < first + count]
      assert held == [i for i, o in zip(ids, owner) if o == rank], rank

"""A canned DNNClassifier over dynamic embedding columns, trained on 2
Horovod ranks (stopped halfway and resumed), against one process.

The ranks read halves of one process's batches, so their update is its
update: every id's row must be on the rank its hash names, with the
Adagrad accumulator one process has for it (to TOLERANCE), and the
ranks' export must serve one process's scores. An accumulator broadcast
from rank 0, averaged, or restored from rank 0's rows at the resume would
move the rows' updates after it away from one process's.
"""
import json
import shutil
import subprocess

import numpy as np
import tensorflow as tf

from estimator_scale.embeddings import dynamic
from estimator_scale.embeddings import sharded
from tests.helpers.processes import PYTHON, worker_env
from tests.helpers import dynamic_canned as canned
from tests.helpers.dynamic_canned import TABLE, result

TOLERANCE = 1e-5
RANKS = 2
UNSEEN = [3, 5]
MISSING = -1
"""What an integer categorical column drops: an example without an id."""

_SERVE = (
    "import json, sys, tensorflow as tf\n"
    "ids = {k: tf.constant(v, tf.int64)[:, None]\n"
    "       for k, v in json.loads(sys.argv[1]).items()}\n"
    "print(json.dumps([tf.saved_model.load(path).signatures['predict'](**ids)"
    "['logistic'].numpy()[:, 0].tolist() for path in sys.argv[2:]]))\n")
"""Scores ids with each export given, in a process that imports only
TensorFlow."""


def _served(ids, *exports):
  out = subprocess.run([PYTHON, "-c", _SERVE, json.dumps(ids)] + list(exports),
                       capture_output=True, text=True, check=True,
                       env=dict(worker_env(), PYTHONPATH=""), timeout=240)
  return np.array(json.loads(out.stdout.strip().splitlines()[-1]))


def _by_id(checkpoint, key, slot):
  """{id: (row, accumulator row)} of column `key`'s table in `checkpoint`,
  with the row number each id has there."""
  reader = tf.train.load_checkpoint(checkpoint)
  table = TABLE.format(key)
  ids = reader.get_tensor(f"{table}/ids")
  accumulator = reader.get_tensor(slot.format(table))
  return {int(ids[r]): (r, accumulator[r]) for r in np.flatnonzero(ids >= 0)}


def test_ranks_train_keep_rows_and_export_as_one_process(tmp_path,
                                                         tmp_path_factory):
  # One test over the three jobs: split over pytest's workers, tests would
  # each train them again. The ranks' first 100 updates and one process's
  # 200, which test_dynamic_canned_restore.py resumes from and compares
  # with too, are trained once a session; the ranks go on from a copy.
  ranks = tmp_path / "ranks"
  shutil.copytree(canned.trained(tmp_path_factory, RANKS, 100), ranks)
  canned.train(ranks, RANKS, 200)
  one = canned.trained(tmp_path_factory, 1, 200)
  _trained_as_one_process((one, ranks))
  for key in sorted(canned.CAPACITY):
    _rows_and_slots_on_the_ids_owner((one, ranks), key)
  _served_with_tensorflow_alone((one, ranks))


def _trained_as_one_process(jobs):
  one, ranks = jobs
  alone, split = result(one), result(ranks)
  assert split["global_step"] == 200
  # Random labels: only the ids' own rows, trained, can memorise them.
  assert split["accuracy"] >= 0.95, split
  assert abs(split["accuracy"] - alone["accuracy"]) <= 1 / canned.EXAMPLES
  np.testing.assert_allclose(split["predicted"], alone["predicted"],
                             atol=TOLERANCE)


def _rows_and_slots_on_the_ids_owner(jobs, key):
  one, ranks = jobs
  alone = _by_id(str(one / "model" / "model.ckpt-200"), key,
                 "training/Adagrad/{}/accumulator")
  split = _by_id(str(ranks / "model" / "sharded_tables" / "ckpt-200"), key,
                 "training/Adagrad/{}/accumulator")
  assert set(split) == set(alone) and len(alone) == canned.EXAMPLES
  ids = sorted(split)
  owner = dynamic.owners(tf.constant(ids, tf.int64), RANKS).numpy()
  for rank in range(RANKS):
    first, rows = sharded.shard_range(canned.CAPACITY[key], RANKS, rank)
    held = [i for i in ids if first <= split[i][0] < first + rows]
    assert held == [i for i, o in zip(ids, owner) if o == rank], rank
  for i in ids:
    np.testing.assert_allclose(split[i][1], alone[i][1], atol=TOLERANCE)
  # Rank 0's own checkpoint holds none of the ranks' rows nor slots.
  saved = tf.train.load_checkpoint(str(ranks / "model" / "model.ckpt-200"))
  assert not [name for name in saved.get_variable_to_shape_map()
              if TABLE.format(key) in name]


def _served_with_tensorflow_alone(jobs):
  one, ranks = jobs
  features, _ = canned.data()
  ids = {key: [int(i) for i in features[key][:canned.KNOWN, 0]] + UNSEEN +
         [MISSING] for key in canned.CAPACITY}
  served, served_one = _served(ids, result(ranks)["export"],
                               result(one)["export"])
  np.testing.assert_allclose(served, served_one, atol=TOLERANCE)
  np.testing.assert_allclose(served[:canned.KNOWN], result(ranks)["predicted"],
                             atol=TOLERANCE)
  # Never admitted: the default vector, as an example without ids reads.
  np.testing.assert_allclose(served[canned.KNOWN:], served[-1], rtol=1e-6)

"""A dynamic table split over 2 Horovod ranks trains as one process's.

Each id's row lives on the rank its hash names; the ranks send each other
the ids of their batches and get the vectors back (all-to-all). After 20
updates in which ids are admitted at their second sighting, freed when
they stop coming and re-admitted, the ranks' slices, merged, must hold the
same ids as one process's table, each with the same vector, optimizer
slots, count and last update, to 1e-5.
"""
import glob

import numpy as np
import tensorflow as tf

from tests.helpers.processes import horovod
from tests.helpers.processes import run
from tests.helpers.processes import PYTHON
from tests.workers import dynamic_equivalence as worker

TOLERANCE = 1e-5


def _by_id(checkpoint):
  """{name: {id: value}} of the table's per-row variables (`checkpoint`
  holds the whole table), and the dense layer's variables."""
  reader = tf.train.load_checkpoint(checkpoint)
  ids = reader.get_tensor(worker.TABLE + "/ids")
  held = np.flatnonzero(ids >= 0)
  table = {}
  for name in reader.get_variable_to_shape_map():
    if name == worker.TABLE or name.startswith(worker.TABLE + "/"):
      if not name.endswith("/sketch"):  # laid out by rank
        value = reader.get_tensor(name)
        table[name] = {int(ids[r]): value[r] for r in held}
  return table


def _dense(checkpoint):
  reader = tf.train.load_checkpoint(checkpoint)
  return {name: reader.get_tensor(name) for name in
          ("model/out/kernel", "model/out/bias")}


def _merged(model_dir):
  """The merged checkpoint of the ranks' slices at the last step."""
  indexes = glob.glob(str(model_dir / "sharded_tables" / "ckpt-*[0-9].index"))
  last = max(indexes, key=lambda path: int(path.split("-")[-1][:-6]))
  return last[:-len(".index")]


def test_two_ranks_hold_one_processs_table(tmp_path):
  args = ["-m", "tests.workers.dynamic_equivalence"]
  run([PYTHON] + args + [f"--model_dir={tmp_path / 'one'}"], timeout=480)
  horovod(2, args + [f"--model_dir={tmp_path / 'two'}",
                     "--distribution=horovod"], timeout=480)
  features, _ = worker.id_data()
  seen = set(features["ids"].ravel().tolist())
  for config in worker.CONFIGS:
    one = tmp_path / "one" / config
    two = tmp_path / "two" / config
    table = _by_id(tf.train.latest_checkpoint(str(one)))
    split = _by_id(_merged(two))
    assert set(split) == set(table), config
    ids = set(table[worker.TABLE + "/ids"])
    assert set(split[worker.TABLE + "/ids"]) == ids, config
    for name, values in table.items():
      for key, value in values.items():
        np.testing.assert_allclose(split[name][key], value, atol=TOLERANCE,
                                   err_msg=f"{config} {name} {key}")
    dense, split_dense = (_dense(tf.train.latest_checkpoint(str(one))),
                          _dense(tf.train.latest_checkpoint(str(two))))
    for name, value in dense.items():
      np.testing.assert_allclose(split_dense[name], value, atol=TOLERANCE)
    # Admissions and evictions happened: some ids are held, not all, and
    # ids of the first half that stopped coming are gone.
    assert 10 < len(ids) < len(seen), config
    assert not set(features["ids"][:100].ravel().tolist()) <= ids, config

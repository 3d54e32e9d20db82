"""A dynamic table trained on one process resumes on 2 Horovod ranks, and
one trained on 2 ranks resumes on one process, and back on ranks.

Each run trains 20 updates in which ids are admitted at their second
sighting (the count-min sketch counts the first), freed when they stop
coming and evicted. Resumed the other way, the rows held before the first
update, id by id over the ranks (each rank holding only the ids it owns),
must be the saved table's: vector, optimizer slot, count, last update and
fresh flag to 1e-6; the sketch, laid out by rank, restarts from zero.
Training then goes on, and saves what it trained.
"""
import glob
import shutil

import numpy as np
import tensorflow as tf

from tests.helpers import dynamic_references
from tests.helpers import dynamic_rows
from tests.helpers.processes import horovod
from tests.helpers.processes import run
from tests.helpers.processes import PYTHON
from tests.workers import dynamic_equivalence as worker

ARGS = ["-m", "tests.workers.dynamic_equivalence", "--configs=adagrad"]
SKETCH = worker.TABLE + "/sketch"


def _saved(checkpoint):
  """({name: {id: row}} of the table a checkpoint holds whole, its
  sketch)."""
  reader = tf.train.load_checkpoint(checkpoint)
  tensors = {name: reader.get_tensor(name)
             for name in reader.get_variable_to_shape_map()
             if name.startswith(worker.TABLE)}
  return dynamic_rows.by_id([tensors], worker.TABLE), tensors[SKETCH]


def _dumped(out, event, step, size):
  """({name: {id: row}} over the ranks' dumps, each rank's sketch)."""
  dumps = []
  for rank in range(size):
    with np.load(out / f"{event}-{step}-of{size}-rank{rank}.npz") as dump:
      dumps.append(dict(dump))
  return (dynamic_rows.by_id(dumps, worker.TABLE),
          [dump[SKETCH] for dump in dumps])


def _one_process(model_dir, steps, out):
  return run([PYTHON] + ARGS + [f"--model_dir={model_dir}",
                                f"--steps={steps}", f"--dump_dir={out}"],
             timeout=300)


def _two_ranks(model_dir, steps, out):
  return horovod(2, ARGS + [f"--model_dir={model_dir}",
                            "--distribution=horovod", f"--steps={steps}",
                            f"--dump_dir={out}"], timeout=300)


def _check_resumed(out, saved, step, steps, size, saved_after):
  """The table as the `size` processes resumed it at `step` is `saved`
  ((rows, sketch)), its sketch restarted; it trained on to `steps` and
  saved what it holds (`saved_after`, the checkpoint of `steps`)."""
  rows, sketch = saved
  assert sketch.any() and 10 < len(rows[worker.TABLE + "/ids"])
  started, sketches = _dumped(out, "start", step, size)
  dynamic_rows.assert_same(started, rows, 1e-6, f"{step} on {size}")
  assert not any(s.any() for s in sketches)
  ended, _ = _dumped(out, "end", steps, size)
  dynamic_rows.assert_same(ended, _saved(saved_after)[0], 1e-6, f"{steps}")
  assert any(np.max(np.abs(ended[worker.TABLE][key] - value)) > 1e-4
             for key, value in started[worker.TABLE].items()
             if key in ended[worker.TABLE])


def _evicted(rows):
  """Whether ids were admitted and freed: the first half's ids that stop
  coming are no longer all held."""
  features, _ = worker.id_data()
  held = set(rows[worker.TABLE + "/ids"])
  return not set(features["ids"][:100].ravel().tolist()) <= held


def _first_20(trained, model_dir):
  """Copies the Adagrad config's model_dir of a reference run of 20
  updates (`trained`, `dynamic_references`': the same worker and data,
  Adagrad trained first) to `model_dir`."""
  shutil.copytree(trained / "adagrad", model_dir)


def test_one_processs_table_resumes_on_two_ranks(tmp_path, tmp_path_factory):
  model_dir = tmp_path / "adagrad"
  _first_20(dynamic_references.one_process(tmp_path_factory), model_dir)
  saved = _saved(str(model_dir / "model.ckpt-20"))
  assert _evicted(saved[0])
  log = _two_ranks(tmp_path, 24, tmp_path / "out")
  assert ("Dynamic tables re-sharded from 1 to 2 ranks"
          in log.stdout + log.stderr)
  _check_resumed(tmp_path / "out", saved, 20, 24, 2,
                 str(model_dir / "sharded_tables" / "ckpt-24"))


def test_two_ranks_table_resumes_on_one_process_and_back(tmp_path,
                                                         tmp_path_factory):
  model_dir = tmp_path / "adagrad"
  _first_20(dynamic_references.two_ranks(tmp_path_factory), model_dir)
  saved = _saved(str(model_dir / "sharded_tables" / "ckpt-20"))
  assert _evicted(saved[0])
  log = _one_process(tmp_path, 24, tmp_path / "one")
  assert ("Sharded tables of 2 ranks restored into one process"
          in log.stdout + log.stderr)
  _check_resumed(tmp_path / "one", saved, 20, 24, 1,
                 str(model_dir / "model.ckpt-24"))
  # The ranks' checkpoints stay; the joined one is listed for max_to_keep.
  assert glob.glob(str(model_dir / "sharded_tables" / "ckpt-20.index"))
  assert any(path.endswith("whole-tables-ckpt-20") for path in
             tf.train.get_checkpoint_state(
                 str(model_dir)).all_model_checkpoint_paths)
  # Back on ranks, from the step one process saved (not the ranks' last).
  log = _two_ranks(tmp_path, 26, tmp_path / "back")
  assert ("Dynamic tables re-sharded from 1 to 2 ranks"
          in log.stdout + log.stderr)
  _check_resumed(tmp_path / "back", _saved(str(model_dir / "model.ckpt-24")),
                 24, 26, 2, str(model_dir / "sharded_tables" / "ckpt-26"))

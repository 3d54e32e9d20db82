"""A dynamic table split over 2 Horovod ranks, or over 2 synchronous
parameter servers, trains as one process's.

Each id's row lives on the rank its hash names; the ranks send each other
the ids of their batches and get the vectors back (all-to-all). After 20
updates in which ids are admitted at their second sighting, freed when
they stop coming and re-admitted, the ranks' slices, merged, must hold the
same ids as one process's table, each with the same vector, optimizer
slots, count and last update, to 1e-5. Restored into 3 ranks, then back
into 2, each rank must hold exactly the ids it owns under the new count,
with their rows as saved, and train on. On synchronous parameter servers
the export serves the table with TensorFlow alone, a restore into 3 ps
tasks moves the rows and trains on, and deltas of the ps parts' rows
restore as their full save does, on one process and on 3 ps tasks.
"""
import glob
import json
import os
import shutil
import subprocess

import numpy as np
import tensorflow as tf

from tests.helpers import dynamic_references
from tests.helpers import dynamic_rows
from tests.helpers.processes import horovod
from tests.helpers.processes import launch
from tests.helpers.processes import run
from tests.helpers.processes import worker_env
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


ARGS = dynamic_references.ARGS


_two_ranks = dynamic_references.two_ranks


def _compact_holds_kept_rows(export_base, checkpoint):
  """Asserts that the compact export under `export_base` (worker.COMPACT)
  holds the rows of one process's `checkpoint` counted at least min_count
  times, each within half its int8 step."""
  (path,) = glob.glob(str(export_base / "*"))
  served = tf.train.load_checkpoint(os.path.join(path, "variables",
                                                 "variables"))
  ids = served.get_tensor(worker.TABLE + "/served_ids")
  rows = (served.get_tensor(worker.TABLE + "/served_rows") *
          served.get_tensor(worker.TABLE + "/served_scales")[:, None])
  table = _by_id(checkpoint)
  counts = table[worker.TABLE + "/counts"]
  kept = {i for i, count in counts.items()
          if count >= worker.COMPACT.min_count}
  assert 0 < len(kept) < len(counts)
  assert sorted(ids.tolist()) == sorted(kept)
  steps = served.get_tensor(worker.TABLE + "/served_scales")
  for i, row, step in zip(ids.tolist(), rows, steps):
    assert np.abs(row - table[worker.TABLE][i]).max() <= (
        step / 2 + TOLERANCE), i


_one_process = dynamic_references.one_process


def test_two_ranks_hold_one_processs_table(tmp_path_factory):
  features, _ = worker.id_data()
  seen = set(features["ids"].ravel().tolist())
  for config in worker.CONFIGS:
    one = _one_process(tmp_path_factory) / config
    two = _two_ranks(tmp_path_factory) / config
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
    # Rank 0's compact export reads the merged slices.
    _compact_holds_kept_rows(_two_ranks(tmp_path_factory) / "compact" / config,
                             tf.train.latest_checkpoint(str(one)))


def _held(dump_dir, event, step, size):
  """{name: {id: value}} of the table over the ranks' dumps (each rank's
  ids its own); at start, each rank's sketch restarted from zero."""
  dumps = []
  for rank in range(size):
    with np.load(dump_dir / f"{event}-{step}-of{size}-rank{rank}.npz") as dump:
      dumps.append(dict(dump))
    if event == "start":
      assert not dumps[-1][worker.TABLE + "/sketch"].any(), rank
  return dynamic_rows.by_id(dumps, worker.TABLE)


def test_a_table_of_two_ranks_reshards_into_three_and_back(
    tmp_path, tmp_path_factory):
  model_dir = tmp_path / "adagrad"  # the worker's model_dir of the config
  shutil.copytree(_two_ranks(tmp_path_factory) / "adagrad", model_dir)
  out = tmp_path / "out"
  for before, size, batch, step, steps in ((2, 3, 24, 20, 24),
                                           (3, 2, 16, 24, 26)):
    log = horovod(size, ARGS + [
        f"--model_dir={tmp_path}", "--distribution=horovod",
        "--configs=adagrad", f"--steps={steps}", f"--dump_dir={out}",
        f"--global_batch_size={batch}"], timeout=480)
    saved = _by_id(str(model_dir / "sharded_tables" / f"ckpt-{step}"))
    assert len(saved[worker.TABLE + "/ids"]) > 10
    started = _held(out, "start", step, size)
    dynamic_rows.assert_same(started, saved, 1e-6, f"{step} on {size} ranks")
    assert (f"Dynamic tables re-sharded from {before} to {size} ranks"
            in log.stdout + log.stderr)
    # Training goes on from there, and saves the table it trained.
    ended = _held(out, "end", steps, size)
    dynamic_rows.assert_same(ended, _by_id(_merged(model_dir)), 1e-6,
                             f"{steps}")
    assert any(np.max(np.abs(ended[worker.TABLE][key] - value)) > 1e-4
               for key, value in started[worker.TABLE].items()
               if key in ended[worker.TABLE])


_SERVE = (
    "import json, sys, tensorflow as tf\n"
    "ids = tf.constant(json.loads(sys.argv[1]), tf.int64)\n"
    "print(json.dumps([tf.saved_model.load(path).signatures['serving_default']"
    "(ids=ids)['logistic'].numpy()[:, 0].tolist() for path in sys.argv[2:]]))"
    "\n")
"""Scores ids with each export given, in a process that imports only
TensorFlow."""


def _served(ids, *exports):
  paths = [glob.glob(str(export / "*"))[0] for export in exports]
  env = dict(worker_env(), PYTHONPATH="")
  out = subprocess.run([PYTHON, "-c", _SERVE, json.dumps(ids)] + paths,
                       capture_output=True, text=True, check=True, env=env,
                       cwd=os.path.dirname(paths[0]), timeout=240)
  return np.array(json.loads(out.stdout.strip().splitlines()[-1]))


def _assert_sync_equals_one_process(one, sync):
  """The ids a synchronous ps job's table holds, asserted those of the one
  process's table, with its rows, slots and dense variables."""
  one, sync = (tf.train.latest_checkpoint(str(d)) for d in (one, sync))
  table, split = _by_id(one), _by_id(sync)
  assert set(split) == set(table)
  ids = set(table[worker.TABLE + "/ids"])
  assert set(split[worker.TABLE + "/ids"]) == ids
  difference = max(float(np.max(np.abs(
      np.float64(split[name][key]) - np.float64(value))))
                   for name, values in table.items()
                   for key, value in values.items())
  split_dense = _dense(sync)
  difference = max([difference] + [
      float(np.max(np.abs(split_dense[name] - value)))
      for name, value in _dense(one).items()])
  print(f"dynamic table, sync PS (2 ps) vs one process after 20 updates "
        f"({one}): max |difference| {difference:.3g} over {len(ids)} ids")
  assert difference <= TOLERANCE
  return ids


def test_parameter_servers_hold_one_processs_table(tmp_path,
                                                  tmp_path_factory):
  # A chief and a worker over 2 ps tasks admit and evict once per update
  # over both workers' ids. (Asynchronous workers are checked in one process,
  # tests/unit/test_dynamic_ps.py: a launched asynchronous job whose chief
  # ends before its worker starts training has been seen to leave the
  # worker waiting.)
  log = launch(1, ARGS + [f"--model_dir={tmp_path / 'sync'}", "--ps_sync",
                    "--distribution=parameter_server", "--configs=adam",
                    "--evaluate", f"--export_dir={tmp_path / 'export'}",
                    f"--compact_export_dir={tmp_path / 'compact'}"], ps=2,
         timeout=400)
  one = _one_process(tmp_path_factory)
  ids = _assert_sync_equals_one_process(one / "adam",
                                        tmp_path / "sync" / "adam")
  features, _ = worker.id_data()
  assert 10 < len(ids) < len(set(features["ids"].ravel().tolist()))
  assert not set(features["ids"][:100].ravel().tolist()) <= ids
  # Both exports serve the same scores; an id never seen, the default's.
  asked = [[int(i) for i in row] for row in features["ids"][-20:]]
  asked.append([3, 5, 7])
  served, served_one = _served(asked, tmp_path / "export" / "adam",
                               one / "export" / "adam")
  np.testing.assert_allclose(served, served_one, atol=TOLERANCE)
  assert np.ptp(served[:-1]) > 1e-4  # the ids' rows, not the default
  # Evaluated on the ps tasks, each answering for its part's rows, as one
  # process evaluates its table.
  assert "Evaluating on the 2 ps tasks" in log.stdout + log.stderr
  assert ("Dynamic table model/table read on the 2 ps tasks, each its own "
          "rows" in log.stdout + log.stderr)
  with open(tmp_path / "sync" / "adam" / "eval.json") as f:
    on_ps = json.load(f)
  with open(one / "adam" / "eval.json") as f:
    alone = json.load(f)
  for key in ("loss", "accuracy", "prediction/mean", "label/mean"):
    assert abs(on_ps[key] - alone[key]) <= TOLERANCE, (key, on_ps, alone)
  assert abs(on_ps["auc"] - alone["auc"]) <= 1e-3
  # The chief's compact export reads the ps tasks' slices.
  _compact_holds_kept_rows(tmp_path / "compact" / "adam",
                           tf.train.latest_checkpoint(str(one / "adam")))
  # Restored into 3 ps tasks, the chief moves each row to its id's task
  # and training goes on.
  shutil.copytree(tmp_path / "sync", tmp_path / "three")
  log = launch(1, ARGS + [f"--model_dir={tmp_path / 'three'}", "--ps_sync",
                          "--distribution=parameter_server", "--configs=adam",
                          "--steps=24"], ps=3, timeout=400)
  assert ("Dynamic table model/table moved onto 3 ps tasks"
          in log.stdout + log.stderr)
  moved = tf.train.load_checkpoint(str(tmp_path / "three" / "adam"))
  assert moved.get_tensor("global_step") == 24
  rows = moved.get_tensor(worker.TABLE + "/ids")
  assert len(set(rows[rows >= 0].tolist())) == np.sum(rows >= 0) > 10


def test_parameter_servers_clip_each_id_as_one_process_does(
    tmp_path, tmp_path_factory):
  # CowClip bounds each id's gradient by its lookups over both workers: each
  # worker's gradient carries its own ids' counts to the chief.
  launch(1, ARGS + [f"--model_dir={tmp_path}", "--ps_sync",
                    "--distribution=parameter_server", "--configs=cowclip"],
         ps=2, timeout=400)
  _assert_sync_equals_one_process(_one_process(tmp_path_factory) / "cowclip",
                                  tmp_path / "cowclip")


def test_parameter_servers_save_deltas_restored_on_one_process_and_3_ps(
    tmp_path):
  # Synchronous ps tasks save a full checkpoint in 3 and deltas of their
  # parts' changed rows in between, named as one process's table has them:
  # one process restores the full save and the delta after it as the full
  # save of the same step. A static table beside the dynamic one, split
  # over the ps tasks too, saves its changed rows as well.
  model_dir = tmp_path / "sync" / "adagrad"
  hashed = ["--hashed_rows=64"]
  split = dict(worker_env(), ESTIMATOR_SCALE_MIN_SLICE_BYTES="256")
  launch(1, ARGS + hashed + [
      f"--model_dir={tmp_path / 'sync'}", "--ps_sync",
      "--distribution=parameter_server", "--configs=adagrad",
      "--full_checkpoint_every=3", "--save_checkpoints_steps=2",
      "--steps=8"], ps=2, timeout=400, env=split)
  # Full at 0 and 6; deltas in between, 8 too; then 8 full at the end.
  deltas = sorted(p.name for p in (model_dir / "deltas" / "6").iterdir()
                  if p.name.endswith(".index"))
  assert deltas == ["delta-8.index"], deltas
  delta = tf.train.load_checkpoint(str(model_dir / "deltas" / "6" /
                                       "delta-8"))
  changed = delta.get_tensor(worker.TABLE + "/_delta_positions")
  assert 0 < len(changed) < 120  # of the 120 rows (the worker's --capacity)
  # Rows of both ps tasks' parts, not all 64.
  changed = delta.get_tensor(worker.HASHED + "/_delta_positions")
  assert 0 < len(changed) < 64 and min(changed) < 32 <= max(changed)
  assert delta.get_tensor(worker.HASHED).shape == (len(changed), 4)
  full = tf.train.load_checkpoint(str(model_dir / "model.ckpt-8"))
  expected = {name: full.get_tensor(name)
              for name in full.get_variable_to_shape_map()
              if name.startswith((worker.TABLE, worker.HASHED))}
  shutil.copytree(tmp_path / "sync", tmp_path / "full")
  os.remove(model_dir / "model.ckpt-8.index")
  tf.compat.v1.train.update_checkpoint_state(
      str(model_dir), str(model_dir / "model.ckpt-6"))
  shutil.copytree(tmp_path / "sync", tmp_path / "chain")
  dumps = tmp_path / "dumps"
  log = run([PYTHON] + ARGS + hashed + [
      f"--model_dir={tmp_path / 'sync'}", "--configs=adagrad", "--steps=9",
      f"--dump_dir={dumps}"], timeout=300)
  assert "and 1 delta(s) after it, to step 8" in log.stdout + log.stderr
  with np.load(dumps / "start-8-of1-rank0.npz") as restored:
    for name, value in expected.items():
      np.testing.assert_array_equal(restored[name], value, err_msg=name)
  # On 3 ps tasks, the chain (each part taking the delta's rows in its
  # range, then the chief moving rows to their ids' tasks) trains the next
  # update as the full save of step 8 does.
  after = {}
  for start in ("full", "chain"):
    log = launch(1, ARGS + hashed + [
        f"--model_dir={tmp_path / start}", "--ps_sync",
        "--distribution=parameter_server", "--configs=adagrad", "--steps=9"],
                 ps=3, timeout=400, env=split)
    checkpoint = str(tmp_path / start / "adagrad" / "model.ckpt-9")
    after[start] = (_by_id(checkpoint),
                    tf.train.load_variable(checkpoint, worker.HASHED))
  assert "and 1 delta(s) after it, to step 8" in log.stdout + log.stderr
  assert ("Dynamic table model/table moved onto 3 ps tasks"
          in log.stdout + log.stderr)
  dynamic_rows.assert_same(after["chain"][0], after["full"][0], atol=0)
  np.testing.assert_array_equal(after["chain"][1], after["full"][1])



def test_horovod_ranks_save_deltas_restored_on_2_and_3_ranks(tmp_path):
  # Two ranks save their tables fully at 2, 8 and 14 and deltas of their
  # changed rows at 4, 6, 10, 12, 16 and 18; the session's last save, at
  # 18, is full too, and they evaluate it. Without that full save, the
  # chain 14, 16, 18 restores on 2 ranks, and on 3 (then re-sharded), the
  # rows it holds, bit for bit, and evaluates to the same metrics.
  model_dir = tmp_path / "adagrad"
  horovod(2, ARGS + [f"--model_dir={tmp_path}", "--distribution=horovod",
                     "--configs=adagrad", "--full_checkpoint_every=3",
                     "--save_checkpoints_steps=2", "--steps=18",
                     "--evaluate"], timeout=480)
  tables = model_dir / "sharded_tables"
  chain = sorted(p.name for p in (tables / "deltas" / "14").iterdir()
                 if p.name.endswith(".index"))
  assert chain == ["delta-16.index", "delta-18.index"], chain
  delta = tf.train.load_checkpoint(str(tables / "deltas" / "14" / "delta-18"))
  changed = sum(len(delta.get_tensor(
      f"{worker.TABLE}/_delta_positions/_delta_rank{rank}")) for rank in (0, 1))
  assert 0 < changed < 120  # of the 120 rows (the worker's --capacity)
  expected = _by_id(str(tables / "ckpt-18"))
  # Evaluated on the ranks, the chain gives the full save's metrics.
  full = json.loads((model_dir / "eval.json").read_text())
  for path in tables.glob("ckpt-18.*"):
    path.unlink()
  log = horovod(2, ARGS + [f"--model_dir={tmp_path}", "--distribution=horovod",
                           "--configs=adagrad", "--steps=18", "--evaluate"],
                timeout=480)
  assert ("and 2 delta(s) after it, to step 18 on 2 ranks"
          in log.stdout + log.stderr)
  assert json.loads((model_dir / "eval.json").read_text()) == full
  out = tmp_path / "out"
  for size in (2, 3):
    shutil.rmtree(tmp_path / "again", ignore_errors=True)
    shutil.copytree(tmp_path, tmp_path / "again",
                    ignore=shutil.ignore_patterns("again", "out"))
    log = horovod(size, ARGS + [
        f"--model_dir={tmp_path / 'again'}", "--distribution=horovod",
        "--configs=adagrad", "--steps=19", f"--dump_dir={out}",
        "--global_batch_size=24"], timeout=480)
    assert ("and 2 delta(s) after it, to step 18 on "
            f"{size} ranks" in log.stdout + log.stderr)
    dumps = []
    for rank in range(size):
      with np.load(out / f"start-18-of{size}-rank{rank}.npz") as dump:
        dumps.append({k: v for k, v in dump.items()
                      if not k.endswith("/sketch")})
    dynamic_rows.assert_same(dynamic_rows.by_id(dumps, worker.TABLE),
                             expected, 0, f"on {size} ranks")

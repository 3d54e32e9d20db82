"""A parameter-server job evaluates on its ps tasks and exports without
restoring its tables into the chief.

A chief, a worker and 2 ps tasks run through the launcher and the command
line, training one hashed table split over the ps tasks
(tools.bench.ps_memory.model). The chief evaluates with its variables on
the ps tasks, each restoring its own parts; the worker takes the chief's
metrics. They must equal one process's on the same checkpoint, and the
export, copied from the checkpoint a block at a time, holds the table and
serves it. (On hosts capped below the table:
tests/multihost/test_tables_over_capped_hosts.py.)
"""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from tests.helpers.processes import CLI, PYTHON, launch, run, worker_env
from tests.workers import evaluate_after_worker

TABLE = "model/table/C26_embedding/embedding_weights"
PYTHON_WORKER = [PYTHON, "-m", "tests.workers.evaluate_after_worker"]


def _args(model_dir, rows, dim, *extra):
  return ["train", "--model_module=tools.bench.ps_memory.model",
          "--model=one_table", "--optimizer=adagrad",
          f"--hparams=rows={rows},dim={dim}", "--global_batch_size=64",
          "--eval_steps=3", "--verbosity=0", f"--model_dir={model_dir}",
          f"--summary_json={model_dir}/summary.json", *extra]


def _eval(model_dir):
  with open(os.path.join(model_dir, "summary.json")) as f:
    return json.load(f)["eval"]


def test_two_ps_tasks_evaluate_as_one_process_does(tmp_path):
  model_dir = tmp_path / "model"
  env = dict(worker_env(), ESTIMATOR_SCALE_MIN_SLICE_BYTES=str(64 << 10))
  proc = launch(1, CLI[1:] + _args(
      model_dir, 1 << 15, 8, "--distribution=parameter_server",
      "--train_steps=20", f"--export_dir={tmp_path / 'export'}"), ps=2,
                timeout=400, env=env)
  log = proc.stdout + proc.stderr
  assert "Evaluating on the 2 ps tasks" in log, log[-3000:]
  # Split over the ps tasks: two parts in the checkpoint's slices.
  reader = tf.train.load_checkpoint(str(model_dir))
  assert reader.get_variable_to_shape_map()[TABLE] == [1 << 15, 8]
  distributed = _eval(model_dir)
  # The export copied the table from the checkpoint, and serves it.
  exported, = [p for p in (tmp_path / "export").iterdir()
               if p.name.isdigit()]
  copied = tf.train.load_checkpoint(str(exported / "variables" / "variables"))
  np.testing.assert_array_equal(copied.get_tensor(TABLE),
                                reader.get_tensor(TABLE))
  served = tf.saved_model.load(str(exported))
  parts = sorted((v for v in served.variables if TABLE in v.name),
                 key=lambda v: v.name)
  np.testing.assert_array_equal(np.concatenate([p.numpy() for p in parts]),
                                reader.get_tensor(TABLE))
  # What the other workers take as their metrics.
  with open(model_dir / "eval" / "metrics-20.json") as f:
    assert json.load(f) == pytest.approx(distributed, rel=1e-6)

  alone = tmp_path / "alone"
  run(CLI + ["evaluate"] + _args(
      model_dir, 1 << 15, 8, "--distribution=none")[1:-1] +
      [f"--summary_json={alone}.json"], env=env)
  with open(f"{alone}.json") as f:
    one = json.load(f)["eval"]
  assert one["global_step"] == distributed["global_step"] == 20
  for key in ("loss", "accuracy", "calibration", "label/mean",
              "prediction/mean"):
    assert abs(one[key] - distributed[key]) <= 1e-6, (key, one, distributed)
  for key in ("auc", "auc_precision_recall"):
    assert abs(one[key] - distributed[key]) <= 1e-3, (key, one, distributed)


def test_the_chief_evaluates_and_predicts_on_the_ps_tasks_after_its_worker_exited(
    tmp_path):
  # Freeing the evaluation's variables on the ps tasks must not wait for a
  # worker that has gone (TensorFlow's Session.reset waited forever).
  out, model_dir = tmp_path / "metrics.json", tmp_path / "model"
  env = dict(worker_env(), ESTIMATOR_SCALE_MIN_SLICE_BYTES=str(4 << 10))
  proc = launch(1, PYTHON_WORKER[1:] + [str(model_dir), str(out)], ps=2,
                timeout=240, env=env)
  log = proc.stdout + proc.stderr
  assert "Evaluating on the 2 ps tasks" in log, log[-3000:]
  assert "Predicting on the 2 ps tasks" in log, log[-3000:]
  written = json.loads(out.read_text())
  metrics = written["metrics"]
  assert metrics["global_step"] >= 10 and 0 < metrics["loss"] < 10, metrics
  # The table's parts were read where they live, one on each ps task.
  parts = {name: device for name, device in written["devices"].items()
           if name.startswith("model/table")}
  assert sorted(d.split("/device")[0] for d in parts.values()) == [
      "/job:ps/task:0", "/job:ps/task:1"], written["devices"]
  # One process's predictions on the same checkpoint, the table whole.
  alone = es.make_estimator(evaluate_after_worker.OneTable(),
                            model_dir=str(model_dir), random_seed=0)
  expected = evaluate_after_worker.predictions(alone)
  np.testing.assert_allclose(np.load(f"{out}.npy"), expected, rtol=0,
                             atol=1e-6)
  # A task that trained nothing has no server: it predicts in-process.
  cluster = {job: [f"localhost:{port}"] for job, port in
             (("chief", 1), ("worker", 2), ("ps", 3))}
  run(PYTHON_WORKER + [str(model_dir), str(tmp_path / "alone"), "alone"],
      env=dict(worker_env(), TF_CONFIG=json.dumps(
          {"cluster": cluster, "task": {"type": "chief", "index": 0}})),
      timeout=120)
  np.testing.assert_allclose(np.load(tmp_path / "alone.npy"), expected,
                             rtol=0, atol=1e-6)

"""Parquet days end to end, as a user runs them: generated, converted,
trained with --follow while the third day lands late, killed and resumed.

`tools.click_logs --days --format=parquet` writes days 1 and 2 of click
logs, `estimator_scale.parquet` converts them, and the zoo's wide_deep
trains 2026-01-01:2026-01-03 with --follow from the converted root. The job
is SIGKILLed inside day 2 and the same command resumes; once it says it
waits for day 3, days 3 and 4 (the fourth only judges the third) are
written, files first and their `_SUCCESS` last, and converted. The converted records are parsed by wide_deep's own
feature spec; the model is wide_deep with the rows' `id` read too
(tests/workers/wide_deep_ids.py), so the ids are counted: each example of
the three days trained once, what the kill lost after the checkpoint once
more. days.json must then hold each day's rows as its examples, its AUC on
the next day and its export, and export/best.json the best of them.
"""
import datetime
import json
import os
import time
import subprocess

import pytest
import tensorflow as tf

from estimator_scale import model as model_lib
from model_zoo import click_data
from tests.helpers import day_jobs
from tests.helpers import waiting
from tests.helpers.processes import PYTHON, ROOT, worker_env
from tools import click_days

_DAYS = ("2026-01-01", "2026-01-02", "2026-01-03", "2026-01-04")
_ROWS = 192  # 6 updates of 32 a day: day 2 is steps 7 to 12
_BATCH = 32


def _run(*command):
  """Runs a module of the checkout as a user would; its output."""
  done = subprocess.run([PYTHON, "-m", *command], cwd=ROOT, env=worker_env(),
                        capture_output=True, text=True, timeout=120,
                        check=False)
  assert done.returncode == 0, done.stdout + done.stderr
  return done.stdout


def _convert(tmp_path):
  return _run("estimator_scale.parquet", f"--input={tmp_path / 'parquet'}",
              f"--output={tmp_path / 'tfrecord'}", "--processes=2")


def _start(tmp_path, run, pause):
  return day_jobs.start(tmp_path, run, pause, [
      "--model_module=tests.workers.wide_deep_ids", "--model=wide_deep_ids",
      f"--train_data={tmp_path / 'tfrecord'}",
      f"--days={_DAYS[0]}:{_DAYS[2]}", "--follow",
      "--follow_timeout_secs=120", f"--model_dir={tmp_path / 'model'}",
      f"--global_batch_size={_BATCH}", "--save_checkpoints_steps=3",
      f"--summary_json={tmp_path / 'summary.json'}"])


def test_parquet_days_converted_killed_resumed_and_the_third_late(tmp_path):
  _run("tools.click_logs", f"--days={_DAYS[0]}:{_DAYS[1]}", "--format=parquet",
       f"--rows_per_day={_ROWS}", f"--data_dir={tmp_path / 'parquet'}")
  assert _convert(tmp_path).count(f"{_ROWS} records") == 2

  first, log = _start(tmp_path, "a", pause=0.5)
  killed_at = day_jobs.kill_after(tmp_path, first, log, 9, 120)
  assert killed_at < 12, "day 2 ended before the kill"

  second, log = _start(tmp_path, "b", pause=0)
  waiting.wait_for(lambda: day_jobs.said(tmp_path, "b", "waiting up to"),
                   f"wait for day {_DAYS[2]}", time.monotonic() + 120,
                   proc=second, poll=0.05)
  # Days 3 and 4 land as Spark writes them, files first: a conversion
  # meanwhile leaves them alone, and the job goes on waiting.
  for day in _DAYS[2:]:
    click_days.write_day(str(tmp_path / "parquet"),
                         datetime.date.fromisoformat(day), _ROWS,
                         success=False)
  assert "no _SUCCESS in the input yet" in _convert(tmp_path)
  assert not (tmp_path / "tfrecord" / f"day={_DAYS[2]}").exists()
  for day in _DAYS[2:]:
    click_days.mark_landed(str(tmp_path / "parquet"), day)
  assert _convert(tmp_path).count(f"{_ROWS} records") == 2
  assert second.wait(timeout=120) == 0, (tmp_path / "log-b.txt").read_text()
  log.close()

  counts, resumed = day_jobs.trained_counts(tmp_path)
  wanted = [i for day in _DAYS[:3] for i in click_days.ids(
      datetime.date.fromisoformat(day), _ROWS)]
  assert sorted(counts) == wanted
  assert set(counts.values()) == {1}
  assert 6 <= resumed <= killed_at

  days = json.loads((tmp_path / "model" / "days.json").read_text())["days"]
  assert sorted(days) == list(_DAYS[:3])
  for day, judged in zip(_DAYS, _DAYS[1:]):
    entry = days[day]
    assert (entry["examples"], entry["left_out"]) == (_ROWS, 0)
    assert entry["eval_day"] == judged
    # The AUC days.json holds is the export's own on the judged day.
    assert entry["eval"]["auc"] == pytest.approx(
        _served_auc(entry["export"], tmp_path / "tfrecord" / f"day={judged}"),
        abs=1e-5)
    assert os.path.exists(os.path.join(entry["export"], "saved_model.pb"))
    assert entry["export"].startswith(str(tmp_path / "model" / "export" / day))
  best = json.loads((tmp_path / "model" / "export" / "best.json").read_text())
  assert best["value"] == max(e["eval"]["auc"] for e in days.values())
  summary = json.loads((tmp_path / "summary.json").read_text())
  assert summary["best"] == best


def _served_auc(export, day_dir):
  """The ROC AUC of `export`'s served predictions on the records of
  `day_dir`, with the thresholds the click head's evaluation uses."""
  records = [r.numpy() for r in tf.data.TFRecordDataset(
      sorted(tf.io.gfile.glob(str(day_dir / "*"))))]
  labels = [tf.train.Example.FromString(r).features.feature[
      click_data.LABEL].int64_list.value[0] for r in records]
  # The export's serving signature run as TensorFlow Serving runs it: its
  # graph loaded into a session (tf.saved_model.load's object graph takes
  # five times longer to serve the same tensors).
  with tf.Graph().as_default(), tf.compat.v1.Session() as session:
    signature = tf.compat.v1.saved_model.loader.load(
        session, [tf.saved_model.SERVING], export).signature_def[
            "serving_default"]
    logistic = session.run(signature.outputs["logistic"].name,
                           {signature.inputs["examples"].name: records})
  auc = tf.keras.metrics.AUC(
      num_thresholds=model_lib.BinaryClassifierModel.auc_thresholds)
  auc.update_state(labels, logistic)
  return float(auc.result())

"""es.train_and_evaluate with tf.estimator's specs, on 1 process, 2 Horovod
ranks and 2 multi_worker_mirrored workers (real processes)."""
import glob
import os

import pytest
import tensorflow as tf

from tests.helpers.processes import PYTHON, horovod, launch, run
from tests.helpers.results import load_results

WORKER = ["-m", "tests.workers.train_eval"]


def _train_eval(mode, out, model_dir, **flags):
  args = WORKER + [f"--distribution={mode}", f"--model_dir={model_dir}",
                   f"--out_dir={out}"] + [f"--{k}={v}"
                                          for k, v in flags.items()]
  if mode == "horovod":
    return horovod(2, args, timeout=180)
  if mode == "multi_worker_mirrored":
    return launch(2, args, timeout=180)
  return run([PYTHON] + args, timeout=180)


def _eval_events(model_dir):
  """{step: loss} of every evaluation summary in model_dir/eval."""
  events = {}
  for path in glob.glob(os.path.join(model_dir, "eval", "events.*")):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        if value.tag == "loss":
          assert event.step not in events, f"two evaluations at {event.step}"
          events[event.step] = value.simple_value
  return events


@pytest.mark.parametrize("mode,workers", [("none", 1), ("horovod", 2),
                                          ("multi_worker_mirrored", 2)])
def test_periodic_evaluation_and_best_export(mode, workers, tmp_path):
  out, model_dir = tmp_path / "out", tmp_path / "model"
  _train_eval(mode, out, model_dir, steps=60, save_checkpoints_steps=20)
  results = load_results(out)
  assert len(results) == workers  # every worker ended and wrote its result
  assert all(r["last_step"] == 60 for r in results)
  evaluations = results[0]["evaluations"]
  assert [e["global_step"] for e in evaluations] == [20, 40, 60]
  assert all(r["evaluations"] == evaluations for r in results)
  events = _eval_events(str(model_dir))
  assert sorted(events) == [20, 40, 60]
  for evaluation in evaluations:
    assert events[evaluation["global_step"]] == pytest.approx(
        evaluation["loss"])
  best = min(evaluations, key=lambda e: e["loss"])
  # One export kept, the best evaluation's; train_and_evaluate returns it
  # only when the last evaluation was the best.
  (kept,) = os.listdir(model_dir / "export" / "best")
  export = str(model_dir / "export" / "best" / kept)
  exported_step = tf.train.load_variable(
      os.path.join(export, "variables", "variables"), "global_step")
  assert exported_step == best["global_step"]
  returned = results[0]["exports"]["best"]
  assert returned == (export if best is evaluations[-1] else None)


def test_early_stopping_stops_both_horovod_ranks_after_the_same_update(
    tmp_path):
  # The eval's global_step never decreases, so its first evaluation (step 10)
  # stays the best, and stop_if_no_decrease(20) must fire at the first
  # evaluation more than 20 updates after it: step 40, long before 1000.
  _train_eval("horovod", tmp_path / "out", tmp_path / "model", steps=1000,
              save_checkpoints_steps=10, early_stopping_metric="global_step",
              stop_after_steps_without_decrease=20)
  results = load_results(tmp_path / "out")
  assert [r["last_step"] for r in results] == [40, 40]
  for result in results:
    assert [e["global_step"] for e in result["evaluations"]] == [
        10, 20, 30, 40]
  assert tf.train.latest_checkpoint(str(tmp_path / "model")).endswith(
      "model.ckpt-40")

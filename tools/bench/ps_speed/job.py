"""One measurement: a job started, timed over a wall window, then stopped.

A window is the same stretch of wall time for every trainer: it opens
`warmup_s` after the last trainer's first run (so asynchronous workers that
joined tens of seconds apart both train through it) and lasts `window_s`.
Its examples are each trainer's runs that ended inside it times the batch
each run consumed; the job is then stopped (SIGTERM to the launcher, which
stops its tasks), so no checkpoint, evaluation or export falls in it.
"""
import glob
import os
import shutil
import subprocess
import sys
import time

from tools import repo
from tools.bench.perf import runner
from tools.bench.ps_speed import model

MODES = ("one", "async", "sync")
"""One process; 1 chief + 1 worker + 1 ps asynchronous; the same, --ps_sync."""
TRAINERS = {"one": 1, "async": 2, "sync": 2}
POLL_S = 0.5


def command(mode, settings, model_dir):
  """The argv that trains `mode`; settings: global_batch, threads, optimizer.

  The update count is past reach: the bench stops the job. Checkpoints are
  saved at step 0 only, before any window.
  """
  if mode not in MODES:
    raise ValueError(f"mode={mode!r}: expected one of {', '.join(MODES)}")
  train = [sys.executable, "-m", "estimator_scale.cli", "train",
           f"--model_module={model.__name__}",
           f"--model={model.TimedWideDeep.name}",
           f"--global_batch_size={settings['global_batch']}",
           f"--optimizer={settings['optimizer']}",
           f"--intra_op_threads={settings['threads']}",
           "--train_steps=1000000000", "--save_checkpoints_steps=1000000000",
           f"--model_dir={model_dir}"]
  if mode == "one":
    return train
  train.append("--distribution=parameter_server")
  if mode == "sync":
    train.append("--ps_sync")
  return [sys.executable, "-m", "estimator_scale.launcher", "--workers", "1",
          "--ps", "1", "--"] + train


def batch_per_run(mode, global_batch):
  """Examples one trainer's run consumes: its share of the global batch,
  synchronous or not (`Topology.replica_batch_size`); an asynchronous
  worker applies its share as an update of its own."""
  return global_batch // TRAINERS[mode]


def read_runs(folder):
  """{task: [(end time, global_step)]} of the runs recorded so far."""
  runs = {}
  for path in sorted(glob.glob(os.path.join(folder, "*.runs"))):
    with open(path, encoding="ascii") as f:
      lines = [line.split() for line in f.read().splitlines()]
    runs[os.path.basename(path)[:-len(".runs")]] = [
        (float(t), int(step)) for t, step in (l for l in lines if len(l) == 2)]
  return runs


def window(runs, trainers, warmup_s, window_s):
  """(start, end) wall times of the window, or None until every trainer ran."""
  firsts = [records[0][0] for records in runs.values() if records]
  if len(firsts) < trainers:
    return None
  start = max(firsts) + warmup_s
  return start, start + window_s


def measure(runs, bounds, batch):
  """The window's figures from the trainers' records: examples/sec, each
  trainer's runs in it, and global_step's advance over it (a cross-check:
  one step per asynchronous run, one per synchronous update)."""
  start, end = bounds
  inside = {task: [r for r in records if start < r[0] <= end]
            for task, records in runs.items()}
  counts = {task: len(records) for task, records in inside.items()}
  steps = [step for records in inside.values() for _, step in records]
  return {"examples_per_sec": sum(counts.values()) * batch / (end - start),
          "seconds": end - start, "runs_by_task": counts,
          "global_steps": max(steps) - min(steps) if steps else 0}


def run(mode, settings, scratch, timeout_s):
  """One measurement of `mode` (job.measure's dict), or None when the job
  exits or no window ends within `timeout_s`; its log stays in `scratch`."""
  folder = os.path.join(scratch, "runs")
  os.makedirs(folder)
  env = dict(os.environ, PYTHONPATH=repo.ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  env[model.RUNS_DIR] = folder
  for name in ("TF_CONFIG", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
    env.pop(name, None)
  deadline, bounds, done = time.time() + timeout_s, None, False
  with open(os.path.join(scratch, "log.txt"), "w", encoding="utf-8") as log:
    proc = subprocess.Popen(
        command(mode, settings, os.path.join(scratch, "model")), cwd=repo.ROOT,
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
      while not done and proc.poll() is None and time.time() < deadline:
        time.sleep(POLL_S)
        bounds = bounds or window(read_runs(folder), TRAINERS[mode],
                                  settings["warmup_s"], settings["window_s"])
        done = bounds is not None and time.time() > bounds[1] + POLL_S
    finally:
      # The launcher stops its tasks on SIGTERM, each within its own grace.
      runner.stop_group(proc, grace_s=30)
      shutil.rmtree(os.path.join(scratch, "model"), ignore_errors=True)
  if not done:
    return None
  return measure(read_runs(folder), bounds,
                 batch_per_run(mode, settings["global_batch"]))

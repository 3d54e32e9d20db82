"""Elastic TF_CONFIG jobs on the rig: a host dies, the job goes on without it.

estimator-scale-launch --max_restarts restarts the cluster on the hosts that
still answer, from the last checkpoint, and takes a host back when it
answers again. Each test trains digits_cnn with AdaScale (2 micro-batches
per worker, so S is 2 per worker) to its step target, and checks from the
chief's summaries that global_step and tau run on across every change (no
update lost beyond the last checkpoint, tau never restarting) and that
`adascale/scale` follows the number of workers.
"""
import glob
import json
import os
import re
import subprocess
import threading
import time

import pytest
import tensorflow as tf

from tests.helpers import waiting
from tests.helpers.checkpoints import checkpoint_step
from tests.helpers.processes import ROOT
from tests.helpers.rig import (LAUNCH_ENV, PYTHON,
                               assert_no_job_processes_within)


TRAIN_STEPS = 1000
TRAIN = ["--model=digits_cnn", "--lr_scaling=adascale",
         "--accumulation_steps=2", "--learning_rate=0.02",
         f"--train_steps={TRAIN_STEPS}", "--save_checkpoints_steps=50",
         "--log_every_n_steps=10"]


class _Job:
  """The launcher running in host1, its output lines collected as they come."""

  def __init__(self, host1, distribution, model_dir, summary, ps=0):
    argv = ([PYTHON, "-m", "estimator_scale.launcher", "--hosts", "host1,host2",
             "--min_workers", "1", "--max_restarts", "2", "--probe_every",
             "2"] + (["--ps", str(ps)] if ps else []) +
            ["--", PYTHON, "-m", "estimator_scale.cli",
             f"--distribution={distribution}", f"--model_dir={model_dir}",
             f"--summary_json={summary}"] + TRAIN)
    self.proc = host1.popen(argv, cwd=ROOT, env=LAUNCH_ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    self.lines = []
    self._reader = threading.Thread(target=self._read, daemon=True)
    self._reader.start()

  def _read(self):
    for line in self.proc.stdout:
      self.lines.append(line.rstrip("\n"))

  def launch_lines(self):
    return [l for l in self.lines if l.startswith("[launch]")]

  def wait_for(self, condition, what, timeout):
    try:
      waiting.wait_for(condition, what, time.monotonic() + timeout,
                       proc=self.proc, poll=0.5,
                       log=lambda: "\n".join(self.lines[-60:]))
    except pytest.fail.Exception:
      self.proc.kill()
      self._reader.join(5)
      raise

  def save(self, path):
    with open(path, "w", encoding="utf-8") as f:
      f.write("\n".join(self.lines))

  def finish(self, timeout):
    try:
      self.proc.wait(timeout)
    except subprocess.TimeoutExpired:
      self.proc.kill()
      pytest.fail("the job did not finish:\n" + "\n".join(self.lines[-60:]))
    self._reader.join(5)
    return self.proc.returncode


def _runs(model_dir):
  """Per run of the job, in order: [(step, {tag: value})] of the chief's
  training summaries, from the events file each run writes (up to where a
  stopped run's file was cut off).

  A summary op named like the variable it reads gets a suffix
  (`adascale/progress_1`), dropped here.
  """
  runs = []
  for path in glob.glob(os.path.join(model_dir, "events.out.tfevents.*")):
    events = []
    try:
      for event in tf.compat.v1.train.summary_iterator(path):
        values = {re.sub(r"_\d+$", "", v.tag): v.simple_value
                  for v in event.summary.value}
        if "adascale/progress" in values:
          events.append((event.wall_time, event.step, values))
    except tf.errors.DataLossError:  # a run stopped mid-record
      pass
    if events:
      runs.append(sorted(events, key=lambda e: (e[0], e[1])))
  return [[(step, values) for _, step, values in run]
          for run in sorted(runs, key=lambda r: r[0][0])]


def _resumed_at(line):
  return int(line.rsplit("resuming at step ", 1)[1])


def _check_continuity(model_dir, resumed):
  """tau and global_step run on across restarts; returns the S each run's
  updates used."""
  runs, scales = _runs(model_dir), []
  # A restarted run that failed before its first summary leaves no run.
  assert 2 <= len(runs) <= len(resumed) + 1, [(r[0][0], r[-1][0])
                                              for r in runs]
  for before, after in zip(runs, runs[1:]):
    # The restart that started `after`: the last to resume before its first.
    first_step, first = after[0]
    step = max((s for s in resumed if s < first_step), default=None)
    assert step is not None, (first_step, resumed)
    # What the run before wrote up to the checkpoint the next one resumed.
    kept = [values for at, values in before if at <= step]
    tau_at_checkpoint = kept[-1]["adascale/progress"]
    # From the checkpoint's tau, not from zero.
    assert first["adascale/progress"] >= tau_at_checkpoint
  for run in runs:
    taus = [values["adascale/progress"] for _, values in run]
    assert taus == sorted(taus)
    # The scale variable holds the S of the last update: the checkpoint's
    # until the run's first update has assigned its own.
    scales.append({values["adascale/scale"] for _, values in run[1:]})
  assert runs[-1][-1][0] >= TRAIN_STEPS - 10
  return scales


@pytest.mark.parametrize("distribution", ["multi_worker_mirrored"])
def test_a_killed_host_leaves_the_job_and_a_returning_one_joins(
    cluster, tmp_path, distribution):
  host1, host2 = cluster(2, loopback_hostname=True).hosts
  model_dir, summary = tmp_path / "model", tmp_path / "summary.json"
  job = _Job(host1, distribution, model_dir, summary)
  job.wait_for(lambda: checkpoint_step(model_dir) >= 50,
               "checkpoint of step 50", 300)
  host2.kill_all()
  job.wait_for(lambda: len(job.launch_lines()) >= 1, "restart", 120)
  shrink = job.launch_lines()[0]
  assert "lost host host2" in shrink and "2 -> 1 workers without host2" in \
      shrink, shrink
  # Back at once: the job takes it at its next checkpoint, so host1 trains
  # alone until then.
  resumed = _resumed_at(shrink)
  host2.start_sshd()
  job.wait_for(lambda: len(job.launch_lines()) >= 2, "second restart",
               300)
  grow = job.launch_lines()[1]
  assert grow.startswith("[launch] host2 answers again; restart: 1 -> 2 "
                         "workers, resuming at step "), grow
  code = job.finish(600)
  job.save(tmp_path / "launch.log")  # for a look after a failure
  assert code == 0, "\n".join(job.lines[-60:])
  assert len(job.launch_lines()) == 2, job.launch_lines()
  with open(summary, encoding="utf-8") as f:
    result = json.load(f)
  assert result["global_step"] == TRAIN_STEPS and result["workers"] == 2
  assert result["eval"]["accuracy"] >= 0.95, result
  scales = _check_continuity(str(model_dir),
                             [resumed, _resumed_at(grow)])
  assert scales == [{4.0}, {2.0}, {4.0}], scales
  assert_no_job_processes_within((host1, host2), 10)


def test_parameter_server_job_goes_on_without_a_killed_host(cluster,
                                                             tmp_path):
  host1, host2 = cluster(2).hosts
  model_dir, summary = tmp_path / "model", tmp_path / "summary.json"
  job = _Job(host1, "parameter_server", model_dir, summary, ps=1)
  # The chief's first summaries on disk too (its writer flushes every
  # 120 s): the restart ends it past its grace while it waits on the lost
  # host, which can cut the file before any, and the continuity below
  # reads them.
  job.wait_for(lambda: checkpoint_step(model_dir) >= 50 and _runs(
      str(model_dir)), "checkpoint of step 50 and a summary", 400)
  host2.kill_all()
  code = job.finish(600)
  assert code == 0, "\n".join(job.lines[-60:])
  # The restart without host2; before it, one on both hosts if host2's sshd
  # still answered when its task was found dead; after it, one more of the
  # worker left if a busy machine failed it. Each resumes.
  restarts = job.launch_lines()
  shrinks = [i for i, l in enumerate(restarts)
             if "lost host host2" in l and "2 -> 1 workers without host2" in l]
  assert len(shrinks) == 1 and all(
      "; restart " in l and (" 2 -> 2 workers" if i < shrinks[0] else
                             " -> 1 workers") in l
      for i, l in enumerate(restarts)), "\n".join(restarts)
  with open(summary, encoding="utf-8") as f:
    result = json.load(f)
  assert result["global_step"] == TRAIN_STEPS and result["workers"] == 1
  assert result["eval"]["accuracy"] >= 0.95, result
  # Each parameter-server worker's update averages its own 2 micro-batches.
  scales = _check_continuity(str(model_dir), [_resumed_at(l) for l in restarts])
  assert len(scales) >= 2 and all(s == {2.0} for s in scales), scales
  assert_no_job_processes_within((host1, host2), 10)

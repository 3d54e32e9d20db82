"""estimator-scale-launch --hosts: TF_CONFIG clusters over ssh on the rig's hosts.

Each job (digits_cnn, the CLI's default model) runs from host1, as a user
runs it from one node of a cluster; the hosts' names resolve to loopback on
themselves (stock Debian). Faults: a host that dies, a host whose link goes
down, a host without the job's Python; each must end the job everywhere
within 60 s with a line naming the host.
"""
import json
import os
import re
import subprocess
import time

import pytest

from tests.helpers.checkpoints import checkpoint_step
from tests.helpers.processes import ROOT
from tests.helpers.rig import (LAUNCH_ENV, assert_no_job_processes_within,
                               launch_argv, start_until_checkpoint)


def _summary(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def test_multi_worker_mirrored_across_two_hosts(cluster, tmp_path):
  host1, host2 = cluster(2, loopback_hostname=True).hosts
  summary = tmp_path / "summary.json"
  proc = host1.run(launch_argv(
      "host1,host2", ["--distribution=multi_worker_mirrored",
                      f"--model_dir={tmp_path / 'model'}", "--train_steps=300",
                      f"--summary_json={summary}"]),
      cwd=ROOT, env=LAUNCH_ENV, timeout=400)
  log = proc.stdout + proc.stderr
  assert proc.returncode == 0, log[-4000:]
  # The chief's lines carry their host; a worker that succeeds prints
  # nothing (tests/multihost/test_clean_logs.py), so the summary says who
  # trained.
  assert "[host1 worker:0]" in log
  result = _summary(summary)
  assert result["workers"] == 2
  assert result["eval"]["accuracy"] >= 0.95, result
  assert_no_job_processes_within((host1, host2), 10)


def test_parameter_server_cluster_across_two_hosts(cluster, tmp_path):
  host1, host2 = cluster(2).hosts
  summary = tmp_path / "summary.json"
  proc = host1.run(launch_argv(
      "host1,host2", ["--distribution=parameter_server",
                      f"--model_dir={tmp_path / 'model'}", "--train_steps=300",
                      f"--summary_json={summary}"], ps=1),
      cwd=ROOT, env=LAUNCH_ENV, timeout=400)
  log = proc.stdout + proc.stderr
  assert proc.returncode == 0, log[-4000:]
  result = _summary(summary)
  assert result["workers"] == 2  # the chief and host2's worker; host1's ps
  assert result["eval"]["accuracy"] >= 0.9, result
  # The parameter server never exits by itself: the launcher stopped it.
  assert_no_job_processes_within((host1, host2), 10)


def _run_until_checkpoint(host1, model_dir, train_steps):
  """A 2-host job from host1, once it has checkpointed some updates."""
  return start_until_checkpoint(host1, launch_argv(
      "host1,host2", ["--distribution=multi_worker_mirrored",
                      f"--model_dir={model_dir}",
                      f"--train_steps={train_steps}",
                      "--save_checkpoints_steps=50"]), model_dir, LAUNCH_ENV)


def _ends_within(proc, seconds):
  start = time.monotonic()
  try:
    log = proc.communicate(timeout=seconds)[0]
  except subprocess.TimeoutExpired:
    proc.kill()
    pytest.fail(f"the job did not end within {seconds} s of the fault: "
                f"{proc.communicate()[0][-3000:]}")
  return log, time.monotonic() - start


@pytest.mark.parametrize("fault", ["host_dies", "link_down"])
def test_a_lost_host_ends_the_job_and_a_restart_resumes(cluster, tmp_path,
                                                        fault):
  host1, host2 = cluster(2, loopback_hostname=True).hosts
  model_dir = tmp_path / "model"
  proc = _run_until_checkpoint(host1, model_dir, train_steps=100000)
  if fault == "host_dies":
    host2.kill_all()
  else:
    host2.set_link(False)
  log, took = _ends_within(proc, 60)
  assert proc.returncode != 0, log[-3000:]
  lines = [l for l in log.splitlines() if l.startswith("[launch]")]
  assert len(lines) == 1 and "host2" in lines[0], log[-3000:]
  assert_no_job_processes_within((host1, host2), 60 - took)
  # The remaining host resumes from the last checkpoint.
  resumed_from = checkpoint_step(model_dir)
  assert resumed_from >= 50
  summary = tmp_path / "summary.json"
  proc = host1.run(launch_argv(
      "host1", ["--distribution=multi_worker_mirrored",
                f"--model_dir={model_dir}",
                f"--train_steps={resumed_from + 50}",
                f"--summary_json={summary}"]),
      cwd=ROOT, env=LAUNCH_ENV, timeout=300)
  assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
  assert _summary(summary)["global_step"] == resumed_from + 50


def test_a_host_without_the_jobs_python_fails_in_one_line(cluster, tmp_path):
  host1, host2 = cluster(2).hosts
  # host2 has no virtual environment: an empty file system over it.
  hidden = host2.run(["mount", "-t", "tmpfs", "tmpfs",
                      os.path.join(ROOT, ".venv")])
  assert hidden.returncode == 0, hidden.stderr
  start = time.monotonic()
  proc = host1.run(launch_argv(
      "host1,host2", ["--distribution=multi_worker_mirrored",
                      f"--model_dir={tmp_path / 'model'}",
                      "--train_steps=300"]),
      cwd=ROOT, env=LAUNCH_ENV, timeout=120)
  assert time.monotonic() - start < 60
  log = proc.stdout + proc.stderr
  assert proc.returncode == 127, log[-3000:]
  lines = [l for l in log.splitlines() if l.startswith("[launch]")]
  assert lines == ["[launch] host2 worker:1: command not found on host2 (is "
                   "the job's Python installed there at the same path?); "
                   "stopping every task"], log[-3000:]
  assert_no_job_processes_within((host1, host2), 10)


def test_a_task_killed_for_memory_is_named_with_its_hosts_ceiling(
    cluster, tmp_path):
  host1, host2 = cluster(2).hosts
  host2.limit_memory(300 << 20)  # less than a training process needs
  proc = host1.run(launch_argv(
      "host1,host2", ["--distribution=multi_worker_mirrored",
                      f"--model_dir={tmp_path / 'model'}",
                      "--train_steps=300"]),
      cwd=ROOT, env=LAUNCH_ENV, timeout=300)
  log = proc.stdout + proc.stderr
  assert proc.returncode != 0, log[-3000:]
  assert re.search(
      r"\[host2 worker:1\] estimator-scale-launch: out of memory on host2: "
      r"killed by the out-of-memory killer at its memory cgroup's limit of "
      r"300 MiB \(peak \d+ MiB\)", log), log[-3000:]
  lines = [l for l in log.splitlines() if l.startswith("[launch]")]
  assert lines == ["[launch] host2 worker:1 exited with 137; stopping every "
                   "task"], lines
  assert_no_job_processes_within((host1, host2), 10)

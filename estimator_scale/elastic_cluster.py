"""Elastic TF_CONFIG jobs: the cluster restarts on the hosts that answer.

tf.distribute's multi-worker strategy in graph mode has no failure
handling: a worker that dies leaves its peers blocked in a collective until
they time out, and a parameter-server job cannot lose its chief. What
survives is the shared model_dir. So the launcher does what a person would:
stop every task, ask each host whether it still answers ssh, and start a new
cluster on those that do, each task with a TF_CONFIG naming the new
cluster. The workers resume from the latest checkpoint (the job's command
is the same, its step target absolute), and a host that answers again
joins at the next restart.

What a restart means for the job:
- Updates after the last checkpoint are lost and redone; global_step,
  AdaScale's tau and smoothed estimates and the optimizer's slots continue
  from the checkpoint, nothing is applied twice.
- The data is re-sharded by the new TF_CONFIG, and each worker's input
  starts again from the beginning of its new shard: examples are not
  tracked across a restart, so within the epoch of a restart some are read
  twice and others not at all.
- The CLI's --global_batch_size is global: it stays, so each worker's share
  grows when workers leave (it must still divide, or the restart stops in
  one line). AdaScale's default S (workers x accumulation) follows the
  size, and with it the S = 1 batch (global / S); --scale holds S, and so
  tau's unit, fixed instead.

A returning host does not stop the job at once: the restart waits for the
next checkpoint, so the updates it costs are the ones made while the
cluster stops and starts. Only failures count against `max_restarts`, so a
lost host that comes back and goes again is bounded, and a job that grows
back is not.
"""
import dataclasses
import os
import re
import subprocess
import sys
import threading
import time
from typing import Optional

from estimator_scale import launch as launch_lib

NOT_RESTARTABLE = {2: "a configuration error", 126: "a missing directory",
                   127: "a missing command"}
"""Exit codes a restart would only repeat: the task's own message says why."""


@dataclasses.dataclass(frozen=True)
class Policy:
  """When an elastic job restarts.

  Attributes:
    min_workers: fewest training tasks (the chief and workers) a restarted
      cluster may have.
    max_restarts: restarts after failures before the job gives up.
    probe_every: seconds between ssh probes of hosts outside the cluster.
    model_dir: where the job checkpoints, read to log the resumed step and
      to wait for a checkpoint before growing (None: the steps are not
      known here, and a returning host joins at once).
  """
  min_workers: int = 1
  max_restarts: int = 3
  probe_every: float = 10.0
  model_dir: Optional[str] = None


def model_dir_of(command):
  """The --model_dir a training command names, or None."""
  for i, arg in enumerate(command):
    if arg.startswith("--model_dir="):
      return arg.split("=", 1)[1]
    if arg == "--model_dir" and i + 1 < len(command):
      return command[i + 1]
  return None


def checkpoint_step(model_dir):
  """The latest checkpoint's step in a local model_dir (0: none yet), read
  from TensorFlow's `checkpoint` state file; None where it cannot be read
  here (no model_dir, a remote file system)."""
  if not model_dir or "://" in model_dir:
    return None
  try:
    with open(os.path.join(model_dir, "checkpoint"), encoding="utf-8") as f:
      latest = f.readline()
  except FileNotFoundError:
    return 0
  except OSError:
    return None
  found = re.search(r"-(\d+)\"?\s*$", latest)
  return int(found.group(1)) if found else None


def answers(host, ssh_port=None, timeout=25):
  """Whether `host` runs a command over ssh now."""
  port = ["-p", str(ssh_port)] if ssh_port else []
  try:
    return subprocess.run(
        ["ssh", *launch_lib.SSH_OPTIONS, *port, host, "true"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, timeout=timeout).returncode == 0
  except subprocess.TimeoutExpired:
    return False


def answering(hosts, ssh_port=None):
  """The hosts of `hosts` that answer, probed at once."""
  result = {}

  def probe(host):
    result[host] = answers(host, ssh_port)
  threads = [threading.Thread(target=probe, args=(h,), daemon=True)
             for h in hosts]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  return {h for h in hosts if result.get(h)}


class _Prober:
  """Probes the hosts outside the cluster in the background."""

  def __init__(self, hosts, ssh_port, every):
    self._hosts, self._ssh_port, self._every = list(hosts), ssh_port, every
    self._stop = threading.Event()
    self.returned = set()
    self._thread = threading.Thread(target=self._run, daemon=True)
    if self._hosts:
      self._thread.start()

  def _run(self):
    while not self._stop.wait(self._every):
      found = answering(self._hosts, self._ssh_port)
      if found:
        self.returned = found
        return

  def stop(self):
    self._stop.set()


def _tasks(members, ps, chief, port):
  if members[0][0] is None:
    return launch_lib.local_tasks(members[0][1], ps, chief)
  return launch_lib.host_tasks(members, ps, chief, port)


def _workers(members):
  return sum(slots for _, slots in members)


def _resumed(policy):
  step = checkpoint_step(policy.model_dir)
  return (f"resuming at step {step}" if step is not None else
          "resuming from the latest checkpoint")


def launch_elastic(command, hosts, policy, ps=0, chief=False,
                   port=launch_lib.DEFAULT_PORT, timeout=None, out=sys.stdout,
                   extra_env=(), ssh_port=None):
  """Runs `command` as a TF_CONFIG cluster on `hosts`, restarting it on the
  hosts that answer after a failure and with those that come back.

  Args:
    command: argv of every task.
    hosts: [(host, slots)], as `launch.parse_hosts` returns; [(None,
      workers)] runs on this machine (`local_tasks`), where a restart
      keeps the size.
    policy: `Policy`.
    ps, chief, port: as for `launch.host_tasks`.
    timeout: seconds before the whole job, restarts included, is stopped.
    out, extra_env, ssh_port: as for `launch.launch`.

  Returns:
    The job's exit code.
  """
  remote_env = launch_lib.forwarded_environment(os.environ, extra_env)
  members, failures = list(hosts), 0
  deadline = time.time() + timeout if timeout else None
  while True:
    outside = [h for h, slots in hosts if (h, slots) not in members]
    job = launch_lib.Job(command, _tasks(members, ps, chief, port), out,
                         remote_env, ssh_port)
    prober = _Prober(outside, ssh_port, policy.probe_every)
    try:
      outcome, detail = _watch(job, prober, policy, deadline)
    finally:
      prober.stop()
      job.stop()
    if outcome == "done":
      return 0
    if outcome == "timeout":
      out.write(f"[launch] timed out after {timeout}s; stopping all tasks\n")
      return 124
    old = _workers(members)
    if outcome == "grow":
      members = [h for h in hosts if h in members or h[0] in detail]
      out.write(f"[launch] {', '.join(sorted(detail))} answers again; "
                f"restart: {old} -> {_workers(members)} workers, "
                f"{_resumed(policy)}\n")
      continue
    task, code = detail
    why = launch_lib.why_failed(task, code)
    if code in NOT_RESTARTABLE:
      out.write(f"[launch] {why} ({NOT_RESTARTABLE[code]}: a restart would "
                "fail alike); stopping every task\n")
      return launch_lib.exit_code(code)
    failures += 1
    if failures > policy.max_restarts:
      out.write(f"[launch] {why}; no restart left (--max-restarts "
                f"{policy.max_restarts}); stopping every task\n")
      return launch_lib.exit_code(code)
    if members[0][0] is not None:
      alive = answering([h for h, _ in members], ssh_port)
      lost = [h for h, _ in members if h not in alive]
      members = [m for m in members if m[0] in alive]
    else:
      lost = []
    if _workers(members) < max(policy.min_workers, 1):
      out.write(f"[launch] {why}; {_workers(members)} worker(s) left, fewer "
                f"than --min-workers {policy.min_workers}; stopping every "
                "task\n")
      return launch_lib.exit_code(code)
    without = f" without {', '.join(lost)}" if lost else ""
    out.write(f"[launch] {why}; restart {failures} of {policy.max_restarts}: "
              f"{old} -> {_workers(members)} workers{without}, "
              f"{_resumed(policy)}\n")


def _watch(job, prober, policy, deadline):
  """Waits until the job ends, fails, runs out of time, or may grow.

  Returns:
    ("done", None), ("timeout", None), ("failed", (task, code)) or
    ("grow", hosts that answer again).
  """
  grow_after = None
  while True:
    failed = job.failed()
    if failed:
      return "failed", failed
    if job.succeeded():
      return "done", None
    if deadline and time.time() > deadline:
      return "timeout", None
    if prober.returned:
      step = checkpoint_step(policy.model_dir)
      if step is None:
        return "grow", prober.returned
      if grow_after is None:
        grow_after = step
      elif step > grow_after:
        return "grow", prober.returned
    time.sleep(0.2)

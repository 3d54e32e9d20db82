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
  size, and with it the S = 1 batch (global / S); --batch_scale holds S, and
  so tau's unit, fixed instead.

A returning host does not stop the job at once: the restart waits for the
next checkpoint, so the updates it costs are the ones made while the
cluster stops and starts. Only failures count against `max_restarts`, so a
lost host that comes back and goes again is bounded, and a job that grows
back is not.

This module decides (when to restart, on which hosts, what to say);
`job.run`, whose watch loop also runs every plain launch, carries it out.
"""
import dataclasses
import os
import re
import threading
from typing import Optional

from estimator_scale.launcher import remote

NOT_RESTARTABLE = {2: "a configuration error", 126: "a missing directory",
                   127: "a missing command"}
"""Exit codes a restart would only repeat: the task's own message says why."""


@dataclasses.dataclass(frozen=True)
class Policy:
  """When an elastic job restarts.

  Attributes:
    min_workers: fewest training tasks (the chief and workers) a restarted
      cluster may have.
    max_restarts: restarts after failures before the job gives up; 0 is
      a plain launch, which the first failure ends.
    probe_every: seconds between ssh probes of hosts outside the cluster.
    model_dir: where the job checkpoints, read to log the resumed step and
      to wait for a checkpoint before growing (None: the steps are not
      known here, and a returning host joins at once).
  """
  min_workers: int = 1
  max_restarts: int = 3
  probe_every: float = 10.0
  model_dir: Optional[str] = None


PLAIN = Policy(max_restarts=0)
"""A launch without --max_restarts: an elastic one that never restarts."""


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


class Returning:
  """Hosts outside the cluster that answer ssh again, their tasks' ports
  free (nothing left of a start before a cut), probed in the
  background; the job takes them at its first checkpoint after they
  answered, so a restart to grow costs only the updates made while the
  cluster stops and starts."""

  def __init__(self, hosts, ssh_port, policy, ports=None):
    self._hosts, self._ssh_port = list(hosts), ssh_port
    self._ports = ports  # {host: its tasks' ports}: free before it joins
    self._every, self._model_dir = policy.probe_every, policy.model_dir
    self._stop = threading.Event()
    self._returned = set()
    self._grow_after = None  # the checkpoint step when they answered
    self._thread = threading.Thread(target=self._run, daemon=True)
    if self._hosts:
      self._thread.start()

  def _run(self):
    while not self._stop.wait(self._every):
      found = remote.answering(self._hosts, self._ssh_port, self._ports)
      if found:
        self._returned = found
        return

  def ready(self):
    """The hosts to grow by now: those that answer again once a checkpoint
    followed their answer (at once where checkpoints cannot be read here);
    an empty set before."""
    if not self._returned:
      return set()
    step = checkpoint_step(self._model_dir)
    if step is None:
      return self._returned
    if self._grow_after is None:
      self._grow_after = step
    elif step > self._grow_after:
      return self._returned
    return set()

  def stop(self):
    self._stop.set()


def final_line(why, code, failures, policy):
  """The line that ends the job after a task failed, or None where
  `policy` restarts it.

  Args:
    why: the line naming the failed task (`job.why_failed`).
    code: the task's exit code.
    failures: restarts after failures the job has had.
    policy: `Policy`.
  """
  if not policy.max_restarts:
    return f"{why}; stopping every task"
  if code in NOT_RESTARTABLE:
    return (f"{why} ({NOT_RESTARTABLE[code]}: a restart would fail alike); "
            "stopping every task")
  if failures >= policy.max_restarts:
    return (f"{why}; no restart left (--max_restarts {policy.max_restarts}); "
            "stopping every task")
  return None


def resumed(policy):
  """How a restart line says where the job goes on."""
  step = checkpoint_step(policy.model_dir)
  return (f"resuming at step {step}" if step is not None else
          "resuming from the latest checkpoint")

"""Elastic TF_CONFIG jobs: the cluster restarts on the hosts that answer;
this decides when and where, `job.run` carries it out."""
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
    min_workers: fewest training tasks a restarted cluster may have.
    max_restarts: restarts after failures; 0 is a plain launch.
    probe_every: seconds between ssh probes of hosts outside the cluster.
    model_dir: where the job checkpoints, or None (hosts join at once).
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
  """Latest checkpoint step in a local model_dir (0: none, None: unread)."""
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
  """Hosts outside the cluster answering ssh again, ports free, probed in the
  background; the job grows by them at its next checkpoint."""

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
    """The hosts to grow by now: those a checkpoint has followed."""
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
  """The line ending the job after a task failed, or None where `policy`
  restarts it."""
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

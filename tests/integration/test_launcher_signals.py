"""A signal to estimator-scale-launch ends its tasks, not only itself.

The tasks run in sessions of their own, so nothing but the launcher can
stop them. Here each task (a chief, a worker and a ps task, small Python
scripts) starts a child of its own in its process group and writes both
pids; the launcher gets SIGTERM or SIGINT (Ctrl-C), and every one of those processes
must be gone when it has exited, with the code and the one line that name
the signal. One task ignores SIGTERM in the second case, so it is only
killed after the grace period. A launcher killed outright (SIGKILL, which
it cannot catch) takes its tasks with it too.
"""
import contextlib
import os
import signal
import subprocess
import time

import pytest

from tests.helpers import processes
from tests.helpers import waiting
from tests.helpers.processes import PYTHON, ROOT, worker_env

TASK = """
import json, os, signal, subprocess, sys, time
task = json.loads(os.environ["TF_CONFIG"])["task"]
if task["type"] == "worker" and task["index"] == int(sys.argv[2]):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen(["sleep", "300"])
name = os.path.join(sys.argv[1], f"{task['type']}{task['index']}")
with open(name + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
os.rename(name + ".tmp", name)
print("started", flush=True)
time.sleep(300)
"""
TASKS = 3
"""--workers 1 --ps 1: chief 0, worker 0 and ps 0."""


def _pids(directory, timeout=60):
  """Every task's and its child's pid, once all tasks wrote them."""
  waiting.wait_for(lambda: len(os.listdir(directory)) >= TASKS and not any(
      name.endswith(".tmp") for name in os.listdir(directory)),
                   "every task's pid", time.monotonic() + timeout, poll=0.1,
                   log=lambda: str(os.listdir(directory)))
  return [int(pid) for name in os.listdir(directory)
          for pid in open(os.path.join(directory, name)).read().split()]


def _stop_left(directory):
  """Kills what a failing launcher left: the process group of every task
  that wrote its pid (the group outlives a task that its children
  outlive)."""
  for name in os.listdir(directory):
    if name.endswith(".tmp"):
      continue
    task = int(open(os.path.join(directory, name)).read().split()[0])
    with contextlib.suppress(ProcessLookupError):
      os.killpg(task, signal.SIGKILL)


def _launch(directory, stubborn):
  return subprocess.Popen(
      [PYTHON, "-m", "estimator_scale.launcher", "--workers", "1", "--ps",
       "1", "--", PYTHON, "-c", TASK, str(directory), str(stubborn)],
      cwd=ROOT, env=worker_env(), stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True)


@pytest.mark.parametrize("number,stubborn", [(signal.SIGTERM, -1),
                                             (signal.SIGINT, 0)])
def test_a_signalled_launcher_leaves_no_task_running(tmp_path, number,
                                                     stubborn):
  launcher = _launch(tmp_path, stubborn)
  try:
    pids = _pids(tmp_path)
    assert len(pids) == 2 * TASKS and all(map(processes.alive, pids)), pids
    launcher.send_signal(number)
    output, _ = launcher.communicate(timeout=60)
  finally:
    if launcher.poll() is None:
      launcher.kill()
    _stop_left(tmp_path)
  assert launcher.returncode == 128 + number, output
  name = signal.Signals(number).name
  assert [line for line in output.splitlines() if line.startswith(
      "[launch]")] == [f"[launch] got {name}; stopping every task (SIGTERM "
                       "to each task's process group, SIGKILL after a grace "
                       "period)"], output
  # The children, reparented, die on their own.
  waiting.until_gone(pids, 10, output)


def test_a_killed_launcher_leaves_no_task_running(tmp_path):
  """SIGKILL gives the launcher no chance to stop anything: the tasks die
  with it (the tasks' own children are theirs to stop)."""
  launcher = _launch(tmp_path, 0)
  try:
    tasks = _pids(tmp_path)[::2]
    assert all(map(processes.alive, tasks)), tasks
    launcher.kill()
    launcher.wait(timeout=60)
    waiting.until_gone(tasks, 10)
  finally:
    if launcher.poll() is None:
      launcher.kill()
    _stop_left(tmp_path)

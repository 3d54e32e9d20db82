"""Peak resident memory of a launched job's tasks, read from /proc.

The launcher starts every task as its own child process with its
TF_CONFIG in its environment, so the tasks are found by their parent and
named by that TF_CONFIG. A task's VmHWM (its peak resident set) only grows,
so the last value read before it exits is its peak.
"""
import json
import os
import re
import subprocess
import time

_MIB = 1 << 20


def _parent(pid):
  with open(f"/proc/{pid}/stat") as f:
    return int(f.read().rsplit(")", 1)[1].split()[1])


def _task_name(pid):
  """"ps:0" of a process whose TF_CONFIG names its task, else None."""
  with open(f"/proc/{pid}/environ", "rb") as f:
    for entry in f.read().split(b"\0"):
      if entry.startswith(b"TF_CONFIG="):
        task = json.loads(entry[len(b"TF_CONFIG="):])["task"]
        return f"{task['type']}:{task['index']}"
  return None


def tasks(launcher_pid):
  """{task name: pid} of the launcher's children that have a TF_CONFIG."""
  found = {}
  for entry in os.listdir("/proc"):
    if not entry.isdigit():
      continue
    try:
      if _parent(int(entry)) == launcher_pid:
        name = _task_name(int(entry))
        if name:
          found[name] = int(entry)
    except (OSError, ValueError, KeyError, IndexError):
      continue  # gone meanwhile, or not ours to read
  return found


def _status_bytes(pid, field):
  try:
    with open(f"/proc/{pid}/status") as f:
      match = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.MULTILINE)
  except OSError:
    return None
  return int(match.group(1)) * 1024 if match else None


def peak_bytes(pid):
  """The process's VmHWM in bytes; None once it has exited."""
  return _status_bytes(pid, "VmHWM")


def resident_bytes(pid):
  """The process's VmRSS in bytes now; None once it has exited."""
  return _status_bytes(pid, "VmRSS")


def watch(command, env, log_path, every=0.25, timeout=900, timeline=None):
  """Runs the launcher `command`; returns ({task: peak bytes}, exit code).

  Its output goes to `log_path`. A run past `timeout` seconds is stopped.
  With a list as `timeline`, each sample appends (time.time(), {task:
  resident bytes}) to it.
  """
  peaks, pids = {}, {}
  with open(log_path, "w") as log:
    proc = subprocess.Popen(command, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
      pids.update(tasks(proc.pid))
      now, resident = time.time(), {}
      for name, pid in pids.items():
        peak = peak_bytes(pid)
        if peak is not None:
          peaks[name] = max(peak, peaks.get(name, 0))
        if timeline is not None:
          resident[name] = resident_bytes(pid)
      if timeline is not None:
        timeline.append((now, {k: v for k, v in resident.items() if v}))
      time.sleep(every)
    if proc.poll() is None:
      proc.terminate()
    return peaks, proc.wait()


def mib(size):
  return size / _MIB

"""The memory a task may hold, and a line naming a task killed for it.

The OOM killer is silent (exit 137), so a watcher on a pipe writes the line
when the pipe closes without the atexit message after an OOM kill.
"""
import atexit
import json
import os
import socket
import subprocess
import sys

OOM_LINE = "estimator-scale: out of memory:"
"""How the watcher's line begins."""

_WATCHER = r"""
import json, os, sys
fd, counter, peak, report = (int(sys.argv[1]), sys.argv[2], sys.argv[3],
                             json.loads(sys.argv[4]))

def kills():
  try:
    with open(counter) as f:
      for line in f:
        key, _, value = line.partition(" ")
        if key == "oom_kill":
          return int(value)
  except OSError:
    pass
  return 0

before = kills()
said = b""
while True:
  chunk = os.read(fd, 64)
  if not chunk:
    break
  said += chunk
if said.endswith(b"exit") or kills() <= before:
  sys.exit(0)
try:
  with open(peak) as f:
    report += f" (peak {int(f.read()) >> 20} MiB)"
except (OSError, ValueError):
  pass
sys.stderr.write(report + "\n")
"""

_STARTED = []


def cgroup_limit(root="/sys/fs/cgroup", proc_cgroup="/proc/self/cgroup"):
  """(bytes, file) of this process's cgroup memory limit (v1 or v2), or None."""
  try:
    with open(proc_cgroup) as f:
      lines = f.read().splitlines()
  except OSError:
    return None
  for line in lines:
    _, controllers, path = line.split(":", 2)
    if "memory" in controllers.split(","):
      name = os.path.join(root, "memory", path.lstrip("/"),
                          "memory.limit_in_bytes")
    elif controllers == "":
      name = os.path.join(root, path.lstrip("/"), "memory.max")
    else:
      continue
    try:
      with open(name) as f:
        raw = f.read().strip()
    except OSError:
      continue
    if raw.isdigit() and int(raw) < (1 << 62):  # v1's "none" is ~2^63
      return int(raw), name
  return None


def task_name(environ):
  """This task as a launcher's lines name it."""
  if environ.get("TF_CONFIG"):
    task = json.loads(environ["TF_CONFIG"]).get("task", {})
    if "type" in task:
      return f"{task['type']}:{task.get('index', 0)}"
  if environ.get("HOROVOD_RANK") is not None:
    return f"Horovod rank {environ['HOROVOD_RANK']}"
  if environ.get("SLURM_PROCID") is not None:
    return f"Slurm task {environ['SLURM_PROCID']}"
  return f"process {os.getpid()}"


def watch_for_oom_kill(environ=None):
  """Starts this process's watcher (once), where its cgroup has a limit."""
  limit = cgroup_limit()
  if _STARTED or limit is None:
    return
  environ = os.environ if environ is None else environ
  directory = os.path.dirname(limit[1])
  v1 = limit[1].endswith("memory.limit_in_bytes")
  counter = os.path.join(directory,
                         "memory.oom_control" if v1 else "memory.events")
  peak = os.path.join(directory,
                      "memory.max_usage_in_bytes" if v1 else "memory.peak")
  report = (f"{OOM_LINE} {task_name(environ)} on {socket.gethostname()} was "
            "killed by the out-of-memory killer at its memory cgroup's limit "
            f"of {limit[0] >> 20} MiB ({limit[1]}); give the job more hosts "
            "or more memory per host (docs/large-tables.md#sizing-a-"
            "cluster-for-a-table)")
  read, write = os.pipe()
  watcher = subprocess.Popen(  # pylint: disable=consider-using-with
      [sys.executable, "-c", _WATCHER, str(read), counter, peak,
       json.dumps(report)],
      pass_fds=(read,), stdin=subprocess.DEVNULL)
  os.close(read)
  atexit.register(_exiting, write)
  _STARTED.append(watcher)  # held: it outlives this process's objects


def _exiting(write):
  """Tells the watcher this process exits of itself."""
  try:
    os.write(write, b"exit")
    os.close(write)
  except OSError:
    pass

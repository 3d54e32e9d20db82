"""Runs a command inside a memory cgroup of its own, as a host's ceiling.

  python -m tests.helpers.capped --limit_mib=900 --report=r{rank}.json -- CMD

The command (and what it starts) is killed by the kernel's out-of-memory
killer past the limit, swap included, as on a host with that much memory.
When it ends, its peak usage and the OOM kills are written to --report
(JSON; "{rank}" in it is the Horovod rank, "{task}" TF_CONFIG's task, as
"chief0") and the cgroup is removed; the exit status is the command's (-9
as 137 for a kill). With --tasks (TF_CONFIG task types, "chief,ps"), a
task of another type runs uncapped. Needs root and cgroup v1's memory
controller.
"""
import argparse
import json
import os
import sys
import time

ROOT = "/sys/fs/cgroup/memory"


def _write(group, name, value):
  path = os.path.join(group, name)
  if os.path.exists(path):
    with open(path, "w") as f:
      f.write(str(value))


def _read(group, name):
  with open(os.path.join(group, name)) as f:
    return f.read()


def _oom_kills(group):
  for line in _read(group, "memory.oom_control").splitlines():
    key, _, value = line.partition(" ")
    if key == "oom_kill":
      return int(value)
  return int(_read(group, "memory.failcnt") != "0\n")


def _remove(group):
  for _ in range(50):  # busy until the killed processes are reaped
    try:
      os.rmdir(group)
      return
    except OSError:
      time.sleep(0.1)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--limit_mib", type=int, required=True)
  parser.add_argument("--report", required=True)
  parser.add_argument("--tasks", default=None)
  parser.add_argument("command", nargs=argparse.REMAINDER)
  args = parser.parse_args()
  command = args.command[1:] if args.command[:1] == ["--"] else args.command
  task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
  if args.tasks and task.get("type") not in args.tasks.split(","):
    os.execvp(command[0], command)
  group = os.path.join(ROOT, f"estimator_scale_capped_{os.getpid()}")
  os.makedirs(group)
  limit = args.limit_mib << 20
  _write(group, "memory.limit_in_bytes", limit)
  _write(group, "memory.memsw.limit_in_bytes", limit)
  child = os.fork()
  if child == 0:
    _write(group, "cgroup.procs", os.getpid())
    os.execvp(command[0], command)
  _, status, usage = os.wait4(child, 0)
  with open(args.report.format(
      rank=os.environ.get("HOROVOD_RANK", 0),
      task=f"{task.get('type', '')}{task.get('index', '')}"), "w") as f:
    json.dump({"limit_mib": args.limit_mib,
               # The group's peak counts the page cache of files read.
               "peak_mib": int(_read(group, "memory.max_usage_in_bytes")) /
                           (1 << 20),
               "peak_rss_mib": usage.ru_maxrss / 1024,
               "oom_kills": _oom_kills(group),
               "exit": os.waitstatus_to_exitcode(status)}, f)
  _remove(group)
  code = os.waitstatus_to_exitcode(status)
  sys.exit(128 - code if code < 0 else code)


if __name__ == "__main__":
  main()

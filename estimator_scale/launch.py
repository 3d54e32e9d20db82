r"""Starts a TF_CONFIG cluster: N workers (a chief, ps tasks) here or on hosts.

  estimator-scale-launch --workers 2 -- \
      estimator-scale --distribution=multi_worker_mirrored --model_dir=/tmp/run
  estimator-scale-launch --hosts node1,node2:2 --ps 1 -- \
      /opt/venv/bin/python -m estimator_scale.train \
      --distribution=parameter_server --model_dir=/shared/run

(`python -m estimator_scale.launch ...` in a checkout), as horovodrun starts
Horovod ranks. It imports no TensorFlow (the package's public names load on
first touch), so it starts at once and holds no TensorFlow memory beside
its workers'.

Each task gets its TF_CONFIG, and its output lines are prefixed with its
host and task. When any task fails, or a host is lost, the others are
stopped on every host and the launcher exits non-zero (with that task's
code) after one line naming the task and host; when all training tasks
succeed, parameter servers (which never exit) are stopped.

With --max-restarts R the job is elastic instead (elastic_cluster.py):
after a failure the cluster restarts from the last checkpoint on the hosts
that still answer, down to --min-workers K training tasks, at most R times,
and a host that answers again joins at the next checkpoint; one line
gives each change's old and new size and the step it resumes at:

  estimator-scale-launch --hosts node1,node2 --min-workers 1 \
      --max-restarts 3 -- /opt/venv/bin/python -m estimator_scale.train \
      --distribution=multi_worker_mirrored --model_dir=/shared/run

On hosts, each task runs over ssh in the launcher's working directory. Only
the variables a job needs travel (`forwarded_environment`), and they travel
on ssh's stdin, not on the remote command line where `ps` would show them
to every user of that host. A remote task is stopped when its ssh
connection closes, so killing the launcher stops the whole job.
"""
import argparse
import dataclasses
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Optional

FORWARDED_PREFIXES = ("TF_", "HOROVOD_", "ESTIMATOR_SCALE_")
FORWARDED_NAMES = ("PYTHONPATH", "PATH")
"""What a remote task gets of the launcher's environment, besides `-x NAME`:
a whole environment may hold secrets (cloud keys, tokens) a job never reads."""

SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
               "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3")
"""No password prompt (it would hang the job); a host that stops answering
ends its task within about 15 s, so the launcher can stop the others."""

SSH_LOST = 255
"""ssh's exit code when the connection failed or was lost."""

DEFAULT_PORT = 2222


def free_ports(count):
  """Ports the OS says are free now (bound and released)."""
  sockets = []
  for _ in range(count):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    sockets.append(s)
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


@dataclasses.dataclass(frozen=True)
class Task:
  """One TF_CONFIG task: where it runs (host None: this machine)."""
  job: str
  index: int
  address: str
  host: Optional[str] = None

  @property
  def name(self):
    task = f"{self.job}:{self.index}"
    return f"{self.host} {task}" if self.host else task


def cluster_spec(tasks):
  """TF_CONFIG's {job: [host:port, ...]} of `tasks`."""
  cluster = {}
  for task in tasks:
    cluster.setdefault(task.job, []).append(task.address)
  return cluster


def local_tasks(workers, ps=0, chief=False):
  """Tasks on this machine's free ports (a chief is one task more)."""
  ports = iter(free_ports(workers + ps + int(chief)))
  jobs = [("chief", int(chief)), ("worker", workers), ("ps", ps)]
  return [Task(job, i, f"localhost:{next(ports)}")
          for job, count in jobs for i in range(count)]


def parse_hosts(spec):
  """[(host, slots)] of "node1,node2:2"; an error names the bad entry."""
  hosts = []
  for entry in spec.split(","):
    host, _, slots = entry.strip().partition(":")
    if not host or (slots and not slots.isdigit()) or slots == "0":
      raise ValueError(f"--hosts entry {entry!r} is not HOST or HOST:SLOTS "
                       "(SLOTS >= 1), e.g. --hosts node1,node2:2")
    hosts.append((host, int(slots or 1)))
  names = [h for h, _ in hosts]
  if len(set(names)) != len(names):
    raise ValueError(f"--hosts names a host twice ({spec}); give it once "
                     "with its slots, e.g. node1:2")
  return hosts


def host_tasks(hosts, ps=0, chief=False, port=DEFAULT_PORT):
  """Tasks on `hosts`: their slots are the training tasks (the first one
  the chief when asked for), ports counting up from `port` on each host;
  parameter servers go round the hosts after them."""
  tasks, next_port = [], {}
  for host, slots in hosts:
    for _ in range(slots):
      job = "chief" if chief and not tasks else "worker"
      index = sum(t.job == job for t in tasks)
      next_port[host] = next_port.get(host, port - 1) + 1
      tasks.append(Task(job, index, f"{host}:{next_port[host]}", host))
  for i in range(ps):
    host = hosts[i % len(hosts)][0]
    next_port[host] += 1
    tasks.append(Task("ps", i, f"{host}:{next_port[host]}", host))
  return tasks


def forwarded_environment(environ, extra=()):
  """The variables a remote task gets: `FORWARDED_*` and `extra` names
  (NAME, or NAME=VALUE to set one)."""
  env = {k: v for k, v in environ.items()
         if k.startswith(FORWARDED_PREFIXES) or k in FORWARDED_NAMES}
  for item in extra:
    name, eq, value = item.partition("=")
    if eq:
      env[name] = value
    elif name in environ:
      env[name] = environ[name]
    else:
      raise ValueError(f"-x {name}: not set in the launcher's environment; "
                       f"set it, or pass -x {name}=VALUE")
  return env


# Runs on the remote host under bash: reads the exports from stdin (exactly
# their length, so stdin stays open), starts the task in its own process
# group, and stops that group when stdin closes (the launcher stopped or
# was lost), as a task must never outlive its job.
_REMOTE = """set -m
eval "$(head -c {length})"
cd {cwd} || exit 126  # no such directory on this host
"$@" </dev/null &
task=$!
{{ cat >/dev/null; kill -TERM -- -$task; sleep 5; kill -KILL -- -$task; }} \
  >/dev/null 2>&1 &
watch=$!
set +m  # the groups are made; no job-status lines in the task's output
wait $task
code=$?
kill -- -$watch 2>/dev/null
exit $code
"""


def remote_command(host, command, env, cwd, ssh_port=None):
  """(ssh argv, stdin payload) that run `command` on `host` with `env`."""
  exports = "".join(f"export {k}={shlex.quote(v)}\n"
                    for k, v in sorted(env.items())).encode()
  script = _REMOTE.format(length=len(exports), cwd=shlex.quote(cwd))
  remote = " ".join(["bash", "-c", shlex.quote(script), "launch"] +
                    [shlex.quote(c) for c in command])
  port = ["-p", str(ssh_port)] if ssh_port else []
  return ["ssh", *SSH_OPTIONS, *port, host, remote], exports


def _pump(stream, prefix, out):
  for line in iter(stream.readline, b""):
    out.write(f"[{prefix}] {line.decode(errors='replace')}")
    out.flush()


def _kill(processes, grace=15):
  """Stops every task: remote ones through their host first, so that when
  this returns their processes are gone, not merely disconnected."""
  for proc in processes:
    if proc.stdin:  # a remote task: its host stops it when this closes
      try:
        proc.stdin.close()
      except OSError:
        pass
  deadline = time.time() + grace
  for proc in processes:
    if proc.stdin:
      try:
        proc.wait(max(0.1, deadline - time.time()))
      except subprocess.TimeoutExpired:  # its host is lost
        pass
  for proc in processes:
    if proc.poll() is None:
      try:
        os.killpg(proc.pid, signal.SIGTERM)
      except ProcessLookupError:
        pass
  deadline = time.time() + 10
  for proc in processes:
    try:
      proc.wait(max(0.1, deadline - time.time()))
    except subprocess.TimeoutExpired:
      os.killpg(proc.pid, signal.SIGKILL)
      proc.wait()


def why_failed(task, code):
  """One line naming the task, its host and what its exit code means."""
  if task.host and code == SSH_LOST:
    return (f"lost host {task.host} ({task.job}:{task.index}): ssh could not "
            "reach it or the connection dropped")
  if task.host and code == 127:
    return (f"{task.name}: command not found on {task.host} (is the job's "
            "Python installed there at the same path?)")
  if task.host and code == 126:
    return (f"{task.name} could not start on {task.host}: the working "
            f"directory {os.getcwd()} is missing there, or the command is not "
            "executable")
  return f"{task.name} exited with {code}"


class Job:
  """One start of a cluster's tasks: their processes and output pumps.

  Args:
    command: argv of every task.
    tasks: `Task`s (`local_tasks` or `host_tasks`).
    out: where prefixed output goes.
    remote_env: the environment remote tasks get (`forwarded_environment`).
    ssh_port: the hosts' ssh port (None: ssh's default or config).
  """

  def __init__(self, command, tasks, out=sys.stdout, remote_env=None,
               ssh_port=None):
    self.tasks = list(tasks)
    self.processes, self._pumps = [], []
    cluster = cluster_spec(self.tasks)
    for task in self.tasks:
      tf_config = json.dumps({"cluster": cluster,
                              "task": {"type": task.job, "index": task.index}})
      if task.host:
        argv, payload = remote_command(
            task.host, command, dict(remote_env or {}, TF_CONFIG=tf_config),
            os.getcwd(), ssh_port)
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT,
                                start_new_session=True)
        proc.stdin.write(payload)
        proc.stdin.flush()
      else:
        proc = subprocess.Popen(command, env=dict(os.environ,
                                                  TF_CONFIG=tf_config),
                                stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT,
                                start_new_session=True)
      pump = threading.Thread(target=_pump, args=(proc.stdout, task.name, out),
                              daemon=True)
      pump.start()
      self.processes.append(proc)
      self._pumps.append(pump)

  def failed(self):
    """(task, exit code) of the first task that failed, or None."""
    for task, proc in zip(self.tasks, self.processes):
      if proc.poll() not in (None, 0):
        return task, proc.returncode
    return None

  def succeeded(self):
    """Whether every training task exited 0 (parameter servers never exit)."""
    return all(p.poll() == 0 for t, p in zip(self.tasks, self.processes)
               if t.job != "ps")

  def stop(self):
    """Stops every task that still runs; returns once they are gone."""
    _kill(self.processes)
    for pump in self._pumps:
      pump.join(timeout=5)


def exit_code(code):
  """A task's code as the launcher's: a signal's death as 128 + signal."""
  return code if code >= 0 else 128 - code


def launch(command, tasks, timeout=None, out=sys.stdout, extra_env=(),
           ssh_port=None):
  """Runs `command` once per task; returns the job's exit code.

  Args:
    command: argv of every task.
    tasks: `Task`s (`local_tasks` or `host_tasks`).
    timeout: seconds before the whole job is stopped (exit 124).
    out: where prefixed output goes.
    extra_env: `-x` items for remote tasks.
    ssh_port: the hosts' ssh port (None: ssh's default or config).
  """
  job = Job(command, tasks, out, forwarded_environment(os.environ, extra_env),
            ssh_port)
  start = time.time()
  code = 0
  try:
    while True:
      failed = job.failed()
      if failed:
        task, code = failed
        out.write(f"[launch] {why_failed(task, code)}; stopping every task\n")
        break
      if job.succeeded():
        break
      if timeout and time.time() - start > timeout:
        out.write(f"[launch] timed out after {timeout}s; stopping all tasks\n")
        code = 124
        break
      time.sleep(0.2)
  finally:
    job.stop()
  return exit_code(code)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--workers", type=int, default=2,
                      help="workers on this machine (without --hosts)")
  parser.add_argument("--hosts", default=None,
                      help="HOST[:SLOTS],...: training tasks per host, over "
                      "ssh (the first is the chief with --chief or --ps)")
  parser.add_argument("--ps", type=int, default=0,
                      help="parameter servers (implies --chief)")
  parser.add_argument("--chief", action="store_true")
  parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                      help="first TF_CONFIG port on each host (--hosts)")
  parser.add_argument("--ssh_port", type=int, default=None)
  parser.add_argument("-x", dest="env", action="append", default=[],
                      metavar="NAME[=VALUE]",
                      help="also forward this variable to remote tasks")
  parser.add_argument("--timeout", type=float, default=None)
  parser.add_argument("--max-restarts", "--max_restarts", type=int,
                      default=None, dest="max_restarts",
                      help="elastic: restarts after failures, from the last "
                      "checkpoint on the hosts that answer")
  parser.add_argument("--min-workers", "--min_workers", type=int, default=1,
                      dest="min_workers",
                      help="elastic: fewest training tasks to go on with")
  parser.add_argument("--probe-every", "--probe_every", type=float,
                      default=10.0, dest="probe_every",
                      help="elastic: seconds between probes of hosts "
                      "outside the cluster")
  parser.add_argument("--model-dir", default=None,
                      dest="model_dir",
                      help="elastic: the job's checkpoint directory, read "
                      "for the resumed step (default: the command's "
                      "--model_dir)")
  parser.add_argument("command", nargs=argparse.REMAINDER)
  args = parser.parse_args(argv)
  command = args.command[1:] if args.command[:1] == ["--"] else args.command
  if not command:
    parser.error("give the command to run after --")
  if args.workers < 1:
    parser.error("--workers must be >= 1")
  if args.ps < 0:
    parser.error("--ps must be >= 0")
  if args.max_restarts is not None and args.max_restarts < 1:
    parser.error("--max-restarts must be >= 1")
  if args.min_workers < 1:
    parser.error("--min-workers must be >= 1")
  chief = args.chief or args.ps > 0
  try:
    hosts = parse_hosts(args.hosts) if args.hosts else None
    if hosts:
      tasks = host_tasks(hosts, args.ps, chief, args.port)
    else:
      tasks = local_tasks(args.workers, args.ps, chief)
    forwarded_environment(os.environ, args.env)
  except ValueError as e:
    parser.error(str(e))
  if args.max_restarts is None:
    return launch(command, tasks, args.timeout, extra_env=args.env,
                  ssh_port=args.ssh_port)
  from estimator_scale import elastic_cluster  # pylint: disable=g-import-not-at-top
  workers = sum(slots for _, slots in hosts) if hosts else args.workers
  if args.min_workers > workers:
    parser.error(f"--min-workers {args.min_workers} is more than the job's "
                 f"{workers} training task(s)")
  policy = elastic_cluster.Policy(
      min_workers=args.min_workers, max_restarts=args.max_restarts,
      probe_every=args.probe_every,
      model_dir=args.model_dir or elastic_cluster.model_dir_of(command))
  return elastic_cluster.launch_elastic(
      command, hosts or [(None, args.workers)], policy, args.ps, chief,
      args.port, args.timeout, extra_env=args.env, ssh_port=args.ssh_port)


def run():
  """Console-script entry point: `estimator-scale-launch`."""
  sys.exit(main())


if __name__ == "__main__":
  run()

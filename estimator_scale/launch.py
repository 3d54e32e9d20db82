"""Starts a TF_CONFIG cluster on this host: N workers (and a chief and ps tasks).

  estimator-scale-launch --workers 2 -- \
      estimator-scale --distribution=multi_worker_mirrored --model_dir=/tmp/run

(`python tools/launch.py ...` in a checkout), as horovodrun starts Horovod
ranks. It imports nothing of TensorFlow, so it starts in an instant.

Each task gets TF_CONFIG for localhost ports, and its output lines are
prefixed with its task name. When any task fails, the others are killed and
the launcher exits with that task's code (within a second or two); when all
training tasks succeed, parameter servers (which never exit) are stopped.
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time


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


def cluster_spec(workers, ps=0, chief=False):
  """{job: [host:port, ...]} on localhost."""
  ports = iter(free_ports(workers + ps + int(chief)))
  cluster = {"worker": [f"localhost:{next(ports)}" for _ in range(workers)]}
  if chief:
    cluster["chief"] = [f"localhost:{next(ports)}"]
  if ps:
    cluster["ps"] = [f"localhost:{next(ports)}" for _ in range(ps)]
  return cluster


def _pump(stream, prefix, out):
  for line in iter(stream.readline, b""):
    out.write(f"[{prefix}] {line.decode(errors='replace')}")
    out.flush()


def _kill(processes):
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


def launch(command, workers, ps=0, chief=False, timeout=None, out=sys.stdout):
  """Runs `command` once per task; returns the job's exit code."""
  cluster = cluster_spec(workers, ps, chief)
  tasks = [(job, i) for job in ("chief", "worker", "ps")
           for i in range(len(cluster.get(job, [])))]
  processes, names, pumps = [], [], []
  for job, index in tasks:
    env = dict(os.environ, TF_CONFIG=json.dumps(
        {"cluster": cluster, "task": {"type": job, "index": index}}))
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    pump = threading.Thread(target=_pump, args=(proc.stdout, f"{job}:{index}",
                                                out), daemon=True)
    pump.start()
    processes.append(proc)
    names.append(job)
    pumps.append(pump)
  start = time.time()
  code = 0
  try:
    while True:
      trainers = [p for p, n in zip(processes, names) if n != "ps"]
      failed = [p for p in processes if p.poll() not in (None, 0)]
      if failed:
        code = failed[0].returncode
        out.write(f"[launch] a task exited with {code}; stopping the rest\n")
        break
      if all(p.poll() == 0 for p in trainers):
        break
      if timeout and time.time() - start > timeout:
        out.write(f"[launch] timed out after {timeout}s; stopping all tasks\n")
        code = 124
        break
      time.sleep(0.2)
  finally:
    _kill(processes)
    for pump in pumps:
      pump.join(timeout=5)
  return code if code >= 0 else 128 - code


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--workers", type=int, default=2)
  parser.add_argument("--ps", type=int, default=0,
                      help="parameter servers (implies --chief)")
  parser.add_argument("--chief", action="store_true")
  parser.add_argument("--timeout", type=float, default=None)
  parser.add_argument("command", nargs=argparse.REMAINDER)
  args = parser.parse_args(argv)
  command = args.command[1:] if args.command[:1] == ["--"] else args.command
  if not command:
    parser.error("give the command to run after --")
  if args.workers < 1:
    parser.error("--workers must be >= 1")
  return launch(command, args.workers, args.ps, args.chief or args.ps > 0,
                args.timeout)


def run():
  """Console-script entry point: `estimator-scale-launch`."""
  sys.exit(main())


if __name__ == "__main__":
  run()

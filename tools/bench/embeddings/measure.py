"""The bench's jobs on the rig, and the bytes each puts on the hosts' links.

A job is one process tree of worker.py over the first hosts of the rig
(single: one process on host1; replicated and sharded: one Horovod rank
per host; ps: estimator-scale-launch's chief on host1 and worker on
host2, the ps task beside the chief on host1). While it runs, a thread
answers its pauses (tools/bench/perf/windows.py): before and after each
configuration's measured updates it reads every host's eth0 byte counters
(the veth's own, what tc shapes), then lets the trainers go on. The
counters' difference over the updates is a trainer's bytes per update.

The ps task sits beside the chief so that host2's link carries exactly
one trainer's traffic, the worker's to the ps; the chief's stays on the
loopback and is not counted. On Horovod jobs every host holds one rank,
and the figure is the mean over the hosts.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile
import threading

from tools import repo
from tools.bench.embeddings import worker
from tools.bench.perf import runner
from tools.bench.perf import windows

# Seconds a job may take beyond its configurations' predicted updates.
START_ALLOWANCE_S = 240
PS_HOSTS = 2
GLOO_TIMEOUT_S = 300


def counters(cluster):
  """{host: [tx bytes, rx bytes]} of every host's eth0 now."""
  read = {}
  for host in cluster.hosts:
    proc = subprocess.run(["ip", "-n", host.netns, "-s", "-j", "link", "show",
                           "dev", "eth0"], capture_output=True, text=True,
                          check=True)
    stats = json.loads(proc.stdout)[0]["stats64"]
    read[host.name] = [stats["tx"]["bytes"], stats["rx"]["bytes"]]
  return read


def trainers(mode, hosts):
  """Processes that train (and pause) in a job of `mode` on `hosts`."""
  return {"single": 1, "ps": PS_HOSTS}.get(mode, hosts)


def _argv(mode, names, worker_argv, timeout):
  if mode == "ps":
    return ([sys.executable, "-m", "estimator_scale.launcher",
             f"--hosts={','.join(names)}", "--ps=1",
             f"--timeout={timeout}", "--"] + worker_argv)
  if mode == "single":
    return worker_argv
  return runner.launcher_argv("horovodrun", len(names), worker_argv,
                              hosts=names)


def _answer_pauses(cluster, folders, processes, readings, stopped):
  """Reads the counters at both pauses of each configuration, in turn."""
  for folder, reading in zip(folders, readings):
    for window in (0, 1):
      def read(reading=reading):
        reading.append(counters(cluster))
      if not windows.wait_and_release(folder, window, processes, read,
                                      stopped):
        return


def _per_update(before, after, names, updates):
  """{host: {sent, received}} bytes per update between two readings."""
  return {name: {"sent": (after[name][0] - before[name][0]) / updates,
                 "received": (after[name][1] - before[name][1]) / updates}
          for name in names}


def run_job(cluster, mode, hosts, configs, settings, log_dir, predicted_s):
  """One job of `mode` on `hosts` hosts over `configs` [(rows, ids)];
  returns {"ROWSxIDS": figures} or None where it failed.

  settings: {dimension, warmup, steps}; predicted_s: a guess at the
  updates' seconds, which sets the job's time limit.
  """
  hosts = PS_HOSTS if mode == "ps" else hosts
  names = [h.name for h in cluster.hosts[:hosts]]
  scratch = tempfile.mkdtemp(prefix=f"{mode}-{hosts}-", dir=log_dir)
  folders = [os.path.join(scratch, "pauses", str(i))
             for i in range(len(configs))]
  for folder in folders:
    os.makedirs(folder)
  out = os.path.join(scratch, "result")
  timeout = int(START_ALLOWANCE_S + 2 * predicted_s)
  worker_argv = [sys.executable, "-m", worker.MODULE, f"--mode={mode}",
                 "--configs=" + ",".join(f"{r}x{i}" for r, i in configs),
                 f"--pause_dir={os.path.join(scratch, 'pauses')}",
                 f"--model_dir={os.path.join(scratch, 'model')}",
                 f"--out={out}"] + [f"--{k}={v}" for k, v in settings.items()]
  processes = trainers(mode, hosts)
  readings = [[] for _ in configs]
  done = threading.Event()
  thread = threading.Thread(target=_answer_pauses, daemon=True, args=(
      cluster, folders, processes, readings, done.is_set))
  thread.start()
  # Gloo's 30 s default fails a rank whose peers, sharing the machine's
  # cores, still build and initialise their tables.
  env = {"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1",
         "PYTHONPATH": repo.ROOT, "TF_CPP_MIN_LOG_LEVEL": "2",
         "HOROVOD_GLOO_TIMEOUT_SECONDS": str(GLOO_TIMEOUT_S)}
  try:
    code = runner._run(  # pylint: disable=protected-access
        cluster.hosts[0].command(_argv(mode, names, worker_argv, timeout - 20),
                                 cwd=repo.ROOT),
        env, os.path.join(scratch, "log.txt"), timeout)
  finally:
    done.set()
    thread.join()
  results = [repo.load_json(p) for p in sorted(glob.glob(out + ".*.json"))]
  if code != 0 or len(results) != processes:
    print(f"  {mode} on {hosts} hosts: FAILED ({code}); see "
          f"{scratch}/log.txt", flush=True)
    return None
  return {f"{rows}x{ids}": _figures(
      [r["configs"][i] for r in results], readings[i], mode, names)
          for i, (rows, ids) in enumerate(configs)}


def _figures(trained, reading, mode, names):
  """One configuration's figures from its trainers' windows and readings."""
  seconds = max(t["seconds"] for t in trained)
  figures = {"examples_per_sec": sum(t["examples"] for t in trained) / seconds,
             "seconds": seconds, "updates": trained[0]["updates"]}
  if mode == "single":
    return figures
  hosts = _per_update(*reading, names, figures["updates"])
  # A ps job's worker is host2's only trainer; the chief shares host1 with
  # the ps task (see above).
  counted = names[1:] if mode == "ps" else names
  figures.update(hosts=hosts, **{
      way: sum(hosts[n][way] for n in counted) / len(counted)
      for way in ("sent", "received")})
  return figures

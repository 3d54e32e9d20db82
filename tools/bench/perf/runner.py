"""Running the bench: interleaved rounds of fresh processes, each timed out.

Every measurement is a fresh process tree (worker.py, under horovodrun or
estimator-scale-launch when it has several processes), so each has its own
graph, session and peak-memory figure. A round runs every variant once, group
by group, so the two sides of a row run one after the other in each round.
"""
import datetime
import glob
import json
import os
import pathlib
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata

from tools import repo
from tools.bench.perf import variants
from tools.bench.perf import worker

# Seconds before a measurement is stopped (its whole process group) and
# recorded as failed, where variants.TIMEOUT_S names no other.
DEFAULT_TIMEOUT_S = 150


def launcher_argv(launcher, processes, argv, launch_timeout=None,
                  hosts=None, ps=0):
  """`argv` started as `processes` processes by `launcher`.

  Args:
    launcher: python (argv itself, one process), horovodrun (Gloo ranks) or
      launch (estimator-scale-launch's TF_CONFIG workers).
    processes: how many; only horovodrun and launch start several.
    argv: the command each process runs.
    launch_timeout: estimator-scale-launch's own limit, so that it stops its
      workers before the caller's limit stops it (None: no limit).
    hosts: host names to spread the processes over, one each (None: all on
      this host).
    ps: launch only: parameter servers beside a chief and `processes`
      workers.
  """
  if hosts and len(hosts) != processes:
    raise ValueError(f"hosts={hosts}: give one host per process "
                     f"({processes})")
  if launcher == "horovodrun":
    horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    placement = (",".join(f"{h}:1" for h in hosts) if hosts
                 else f"localhost:{processes}")
    return [horovodrun, "--gloo", "-np", str(processes), "-H",
            placement] + argv
  if launcher == "launch":
    limit = [f"--timeout={launch_timeout}"] if launch_timeout else []
    where = [f"--hosts={','.join(hosts)}"] if hosts else [
        f"--workers={processes}"]
    servers = [f"--ps={ps}"] if ps else []
    return ([sys.executable, "-m", "estimator_scale.launcher"] + where +
            servers + limit + ["--"] + argv)
  return argv


def command(spec, out, model_dir, scale=1.0, launch_timeout=130, hosts=None):
  """The argv that measures a variant, its timed steps multiplied by `scale`.

  Args:
    spec: a VARIANTS entry (launcher, processes, worker flags).
    out: result path prefix; each process adds `.<rank>.json`.
    model_dir: the (shared) checkpoint directory.
    scale: multiplies the timed steps (and warm-up, when below 1/4) of
      every kind but startup.
    launch_timeout: estimator-scale-launch's own limit.
    hosts: as launcher_argv's.
  """
  launcher, processes, flags = spec
  flags = dict(flags)
  if flags["kind"] != "startup":  # startup trains the updates its rows name
    flags["steps"] = max(1, int(flags["steps"] * scale))
    flags["warmup"] = max(1, int(flags["warmup"] * min(1.0, scale * 4)))
  argv = [sys.executable, "-m", worker.MODULE, f"--out={out}",
          f"--model_dir={model_dir}"]
  argv += [f"--{k}={v}" for k, v in sorted(flags.items())]
  return launcher_argv(launcher, processes, argv, launch_timeout, hosts)


def combine(results):
  """One measurement from its processes' results: the job's examples/sec.

  Synchronous processes finish together, so the job's time is the slowest
  one's and its rate all their examples over that time; memory is the
  largest process's.
  """
  seconds = max(r["seconds"] for r in results)
  combined = {
      "examples_per_sec": sum(r["examples"] for r in results) / seconds,
      "seconds": seconds,
      "peak_rss_mib": max(r["peak_rss_mib"] for r in results),
      "window_peak_rss_mib": max(
          (r["window_peak_rss_mib"] for r in results
           if r.get("window_peak_rss_mib") is not None), default=None),
      "cores_used": statistics.mean(r["cores_used"] for r in results),
      "processes": len(results)}
  if "windows" in results[0]:  # worker.py --windows: each window likewise
    combined["windows"] = [
        {"examples_per_sec": sum(r["windows"][i]["examples"] for r in results)
                             / max(r["windows"][i]["seconds"] for r in results),
         "seconds": max(r["windows"][i]["seconds"] for r in results)}
        for i in range(len(results[0]["windows"]))]
  # A startup run's own fields (worker.startup_fields); one process.
  combined.update((k, v) for k, v in results[0].items()
                  if k in worker.STARTUP_FIELDS)
  return combined


def stop_group(proc, grace_s=10):
  """Stops the process group `proc` leads: SIGTERM, SIGKILL after grace_s."""
  for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
    try:
      os.killpg(proc.pid, sig)
      proc.wait(wait)
      return
    except (ProcessLookupError, subprocess.TimeoutExpired):
      pass


def _run(argv, env, log_path, timeout):
  """Runs argv in its own process group; on timeout stops the whole group."""
  with open(log_path, "w", encoding="utf-8") as log:
    proc = subprocess.Popen(argv, cwd=repo.ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
      return proc.wait(timeout)
    except subprocess.TimeoutExpired:
      stop_group(proc)
      return "timeout"


def run_measurement(variant, spec, log_dir, scale=1.0,
                    timeout=DEFAULT_TIMEOUT_S, host=None, hosts=None):
  """Runs one measurement of `spec`; returns combine(...) or None on failure.

  Its log (and, briefly, its model_dir) live in a new folder of `log_dir`.
  On the rig (tools/rig/cluster.py), `host` starts the job and `hosts` name
  where its processes run; the job then gets a minimal environment, since
  horovodrun writes the whole of it into every remote command line.
  """
  scratch = tempfile.mkdtemp(prefix=f"{variant}-", dir=log_dir)
  out = os.path.join(scratch, "result")
  if host is None:
    env = dict(os.environ)
    for name in ("TF_CONFIG", "TF_NUM_INTRAOP_THREADS",
                 "TF_NUM_INTEROP_THREADS"):
      env.pop(name, None)  # only --threads may pin a variant
  else:
    env = {"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
  env.update(PYTHONPATH=repo.ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  argv = command(spec, out, os.path.join(scratch, "model"), scale,
                 launch_timeout=timeout - 20, hosts=hosts)
  if host is not None:
    argv = host.command(argv, cwd=repo.ROOT)
  code = _run(argv, env, os.path.join(scratch, "log.txt"), timeout)
  results = [json.loads(pathlib.Path(p).read_text(encoding="utf-8"))
             for p in sorted(glob.glob(out + ".*.json"))]
  shutil.rmtree(os.path.join(scratch, "model"), ignore_errors=True)
  if code != 0 or len(results) != spec[1]:
    print(f"  {variant}: FAILED ({code}); see {scratch}/log.txt", flush=True)
    return None
  return combine(results)


def measure_and_report(variant, log_dir, scale=1.0):
  """run_measurement of a VARIANTS entry, with a line on stdout about it."""
  begin = time.time()
  result = run_measurement(
      variant, variants.VARIANTS[variant], log_dir, scale,
      variants.TIMEOUT_S.get(variant, DEFAULT_TIMEOUT_S))
  shown = "failed" if result is None else (
      f"{result['examples_per_sec']:.0f} ex/s over "
      f"{result['seconds']:.1f} s, {result['peak_rss_mib']:.0f} MiB")
  if result and "session_seconds" in result:
    shown += f", session ready at {result['session_seconds']:.1f} s"
  print(f"  {variant}: {shown} ({time.time() - begin:.0f} s)", flush=True)
  return result


def round_fits(index, elapsed, budget_s):
  """Whether round `index` (from 0), at the mean length of the rounds so
  far, would end within `budget_s`; says so when it would not."""
  if index and elapsed / index + elapsed > budget_s:
    print(f"stopping after {index} rounds: another would pass the "
          f"{budget_s:.0f} s budget", flush=True)
    return False
  return True


def run_rounds(rounds, budget_s, measure_fn, groups=variants.GROUPS,
               clock=time.time):
  """{variant: [measurement per round]}; stops starting rounds past budget.

  A round starts only if, at the mean length of the rounds so far, it would
  end within `budget_s`.
  """
  samples = {v: [] for group in groups for v in group}
  start = clock()
  for index in range(rounds):
    if not round_fits(index, clock() - start, budget_s):
      break
    for group in groups:
      for variant in group:
        samples[variant].append(measure_fn(variant))
  return samples


def _version(name):
  try:
    return metadata.version(name)
  except metadata.PackageNotFoundError:
    return None


def _first_field(path, prefix):
  try:
    with open(path, encoding="utf-8") as f:
      return next(l.split(":", 1)[1].strip() for l in f if l.startswith(prefix))
  except (OSError, StopIteration):
    return None


def machine_info():
  """What the numbers depend on: CPU, cores, memory, versions, load."""
  cpu = _first_field("/proc/cpuinfo", "model name") or platform.processor()
  memory = _first_field("/proc/meminfo", "MemTotal")
  memory = int(memory.split()[0]) // 1024 if memory else None
  cores = len(os.sched_getaffinity(0))
  tf_version = _version("tensorflow-cpu") or _version("tensorflow")
  return {
      "summary": f"{cpu}, {cores} cores, {memory} MiB, Python "
                 f"{platform.python_version()}, TF {tf_version}, Horovod "
                 f"{_version('horovod')}",
      "date": datetime.datetime.now(datetime.timezone.utc).strftime(
          "%Y-%m-%d %H:%M UTC"),
      "cpu": cpu, "cores": cores, "memory_mib": memory,
      "platform": platform.platform(), "python": platform.python_version(),
      "tensorflow": tf_version,
      "tensorflow_estimator": _version("tensorflow-estimator"),
      "horovod": _version("horovod"),
      "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}

"""Allreduce-only runs on 2, 3 and 4 shaped hosts: the model's network half.

Horovod ranks (allreduce_worker.py) and multi_worker_mirrored workers
(collective_worker.py) on the rig's hosts exchange buffers of resnet20's
and the wide MLP's gradient sizes and nothing else, so the times are the
network's and the exchange's, nearly free of the shared machine's CPU
load; scaling_model.py predicts each from inputs taken elsewhere:

- bandwidth and burst of a shaped link: the rate's TCP goodput and the
  token bucket tools/rig/cluster.py gives it (no fit);
- latency per ring step and Horovod's fixed overhead: a line through the
  4-byte allreduce's times on 2, 3 and 4 unshaped hosts;
- the unshaped veth's bandwidth (it has no rate): the largest buffer on 2
  unshaped hosts;
- fp16 compression's casts per byte: the ranks time them alone on the
  largest buffer, in the 2-host unshaped run;
- its float16 sum per byte: what makes the model give the largest
  buffer's compressed allreduce on 2 unshaped hosts its measured time
  (the veth is bound by the CPU, so the sum adds to the copies there);
- multi_worker_mirrored's fixed cost per all-reduce, the 4-byte
  all-reduce's mean time on 2-4 unshaped hosts, and its cost per byte
  beyond the wire: its all-reduce of the largest buffer on 2 unshaped
  hosts, less that and the wire time Horovod's measured.

The rig's hosts share one machine's cores: past its core count each
host's CPU work (copies, sums, casts) gets a share of a core
(links.cpu_share), which the comparison gives the model.

The unshaped runs are therefore calibration; every shaped row (both rates,
every host count and buffer, the 4-byte one included) is a prediction that
the page compares (analysis.py reads both).
"""
import json
import os
import sys
import tempfile

from tools import repo
from tools.bench.network import links
from tools.bench.network import scaling_model
from tools.bench.perf import runner

WORKER = "tools.bench.network.allreduce_worker"
COLLECTIVE_WORKER = "tools.bench.network.collective_worker"
PROBE_BYTES = 4
TIMEOUT_S = 240


def _run(cluster, launcher, argv, hosts, log_dir, tag):
  """`argv` on the first `hosts` hosts; the result its first process wrote
  to the `--out` that this adds."""
  scratch = tempfile.mkdtemp(prefix=f"allreduce-{tag}-", dir=log_dir)
  out = os.path.join(scratch, "result.json")
  names = [h.name for h in cluster.hosts[:hosts]]
  argv = runner.launcher_argv(launcher, hosts, argv + [f"--out={out}"],
                              TIMEOUT_S - 20, hosts=names)
  env = {"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1",
         "PYTHONPATH": repo.ROOT,
         "TF_CPP_MIN_LOG_LEVEL": "2",
         "HOROVOD_CYCLE_TIME": f"{scaling_model.DEFAULT_CYCLE_S * 1e3:g}"}
  code = runner._run(  # pylint: disable=protected-access
      cluster.hosts[0].command(argv, cwd=repo.ROOT), env,
      os.path.join(scratch, "log.txt"), TIMEOUT_S)
  if code != 0 or not os.path.exists(out):
    raise RuntimeError(f"allreduce run {tag} failed ({code}); see "
                       f"{scratch}/log.txt")
  with open(out, encoding="utf-8") as f:
    return json.load(f)


def _horovod(cluster, hosts, buffers, seconds, log_dir, tag):
  sizes = [PROBE_BYTES, *buffers.values()]
  result = _run(cluster, "horovodrun",
                [sys.executable, "-m", WORKER, f"--sizes={_csv(sizes)}",
                 f"--fp16_sizes={_csv(buffers.values())}",
                 f"--seconds={seconds}"], hosts, log_dir, f"horovod-{tag}")
  return {"exchange": "horovod", "cycle_s": result["cycle_s"],
          "gap_s": result["gap_s"],
          "seconds": _medians(result["sizes"]),
          "fp16_seconds": _medians(result["fp16_sizes"]),
          "cast_seconds": result["casts"],
          "samples": {b: r["samples_s"] for b, r in result["sizes"].items()}}


def _collective(cluster, hosts, buffers, seconds, log_dir, tag):
  sizes = [PROBE_BYTES, *buffers.values()]
  result = _run(cluster, "launch",
                [sys.executable, "-m", COLLECTIVE_WORKER,
                 f"--sizes={_csv(sizes)}",
                 f"--seconds={seconds}"], hosts, log_dir, f"collective-{tag}")
  return {"exchange": "collective", "gap_s": result["gap_s"],
          "seconds": _medians(result["sizes"]),
          "samples": {b: r["samples_s"] for b, r in result["sizes"].items()}}


def _csv(values):
  return ",".join(str(int(v)) for v in values)


def _medians(sizes):
  return {b: r["median_s"] for b, r in sizes.items()}


EXCHANGES = {"horovod": _horovod, "collective": _collective}


def measure(host_counts, rate_names, buffers, seconds, log_dir,
            exchanges=tuple(EXCHANGES), kept=()):
  """Runs every (exchange, rate, hosts); returns the runs as the JSON keeps
  them.

  Args:
    host_counts: e.g. (2, 3, 4); the rig has the largest.
    rate_names: links.RATES keys; "unshaped" is always run (calibration).
    buffers: {label: bytes}, e.g. the models' gradient sizes.
    seconds: timed seconds per buffer size and run.
    log_dir: where each run's log goes.
    exchanges: some of EXCHANGES: Horovod's allreduce (plain and fp16) and
      multi_worker_mirrored's all-reduce.
    kept: earlier runs of the other exchanges, kept as they are.
  """
  rates = links.rate_names(",".join(["unshaped", *rate_names]))
  runs = [r for r in kept if r["exchange"] not in exchanges]
  with links.up(max(host_counts)) as cluster:
    for rate in rates:
      links.shape(cluster, rate)
      for hosts in host_counts:
        for exchange in exchanges:
          run = EXCHANGES[exchange](cluster, hosts, buffers, seconds, log_dir,
                                    f"{rate}-{hosts}")
          run.update(rate=rate, hosts=hosts)
          print(f"  {exchange} {rate}, {hosts} hosts: " + ", ".join(
              f"{b} B {t * 1e3:.1f} ms" for b, t in run["seconds"].items())
                + "".join(f"; fp16 {b} B {t * 1e3:.1f} ms"
                          for b, t in run.get("fp16_seconds", {}).items()),
                flush=True)
          runs.append(run)
  return {"buffers": buffers, "probe_bytes": PROBE_BYTES, "runs": runs}

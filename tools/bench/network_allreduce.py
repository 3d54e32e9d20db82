"""Allreduce-only runs on 2, 3 and 4 shaped hosts: the model's network half.

Horovod ranks (allreduce_worker.py) and multi_worker_mirrored workers
(collective_worker.py) on the rig's hosts exchange buffers of resnet20's
and the wide MLP's gradient sizes and nothing else, so the times are the
network's and the exchange's, nearly free of the shared machine's CPU
load; tools/scaling_model.py predicts each from inputs taken elsewhere:

- bandwidth and burst of a shaped link: the rate's TCP goodput and the
  token bucket tools/cluster.py gives it (no fit);
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
the page compares.
"""
import dataclasses
import json
import os
import statistics
import sys
import tempfile

from tools import scaling_model
from tools.bench import links
from tools.bench import runner

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "allreduce_worker.py")
COLLECTIVE_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                 "collective_worker.py")
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
         "TF_CPP_MIN_LOG_LEVEL": "2",
         "HOROVOD_CYCLE_TIME": f"{scaling_model.DEFAULT_CYCLE_S * 1e3:g}"}
  code = runner._run(  # pylint: disable=protected-access
      cluster.hosts[0].command(argv, cwd=runner.ROOT), env,
      os.path.join(scratch, "log.txt"), TIMEOUT_S)
  if code != 0 or not os.path.exists(out):
    raise RuntimeError(f"allreduce run {tag} failed ({code}); see "
                       f"{scratch}/log.txt")
  with open(out, encoding="utf-8") as f:
    return json.load(f)


def _horovod(cluster, hosts, buffers, seconds, log_dir, tag):
  sizes = [PROBE_BYTES, *buffers.values()]
  result = _run(cluster, "horovodrun",
                [sys.executable, WORKER, f"--sizes={_csv(sizes)}",
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
                [sys.executable, COLLECTIVE_WORKER, f"--sizes={_csv(sizes)}",
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


def _unshaped(result, exchange):
  """{hosts: run} of `exchange`'s runs on the unshaped link."""
  return {r["hosts"]: r for r in result["runs"]
          if r["exchange"] == exchange and r["rate"] == "unshaped"}


def calibration(result):
  """What the unshaped runs measure: {latency_s, overhead_s,
  unshaped_bandwidth, fp16_cast_s_per_byte, fp16_sum_s_per_byte, and
  collective_overhead_s and collective_cpu_s_per_byte where the collective
  ran}."""
  unshaped = _unshaped(result, "horovod")
  recipe = scaling_model.Recipe(cycle_s=unshaped[min(unshaped)]["cycle_s"])
  probe = str(result["probe_bytes"])
  latency, overhead = scaling_model.fit_small_allreduces(
      {n: r["seconds"][probe] for n, r in unshaped.items()}, recipe)
  recipe = dataclasses.replace(recipe, overhead_s=overhead)
  largest = max(result["buffers"].values())
  # 2 hosts: the ring moves the whole buffer once each way.
  fixed = scaling_model.exchange_seconds(0, 2, scaling_model.Link(1.0, latency),
                                         recipe)
  data_s = unshaped[2]["seconds"][str(largest)] - fixed
  bandwidth = largest / max(data_s, 1e-9)
  link = links.link("unshaped", latency, bandwidth,
                    links.cpu_share(2, result["machine"]["cores"]))

  def beyond(seconds, wire_bytes):
    """Seconds per gradient byte that `seconds` spent beyond the wire."""
    return max(0.0, seconds - scaling_model.ring_seconds(wire_bytes, 2, link)
               ) / largest

  casts = unshaped[2]["cast_seconds"][str(largest)] / largest

  measured = unshaped[2]["fp16_seconds"][str(largest)]

  def faster_than_measured(sum_per_byte):
    return scaling_model.exchange_seconds(largest, 2, link, fp16_recipe(
        recipe, {"fp16_cast_s_per_byte": casts,
                 "fp16_sum_s_per_byte": sum_per_byte})) < measured

  fit = {"latency_s": latency, "overhead_s": overhead,
         "unshaped_bandwidth": bandwidth, "fp16_cast_s_per_byte": casts,
         # The sum per byte at which the model gives the compressed
         # exchange on 2 unshaped hosts its measured time (none where the
         # rest already takes it).
         "fp16_sum_s_per_byte": (
             scaling_model.bisect(faster_than_measured, 0.0, 1e-6)
             if faster_than_measured(0.0) else 0.0)}
  collective = _unshaped(result, "collective")
  if 2 in collective:
    # Its fixed cost: the probe's mean time beyond a ring of nothing.
    fit["collective_overhead_s"] = max(0.0, statistics.mean(
        r["seconds"][probe] - scaling_model.ring_seconds(0, n, link)
        for n, r in collective.items()))
    fit["collective_cpu_s_per_byte"] = beyond(
        collective[2]["seconds"][str(largest)] - fit["collective_overhead_s"],
        largest)
  return fit


def fp16_recipe(recipe, fit):
  """`recipe` with fp16 compression as the calibration `fit` measured it:
  half the bytes, casts outside the ring, the float16 sum inside it."""
  return dataclasses.replace(
      recipe, compression=0.5, cpu_s_per_byte=fit["fp16_cast_s_per_byte"],
      reduce_s_per_byte=fit["fp16_sum_s_per_byte"])


def comparison(result):
  """Rows of (rate, hosts, buffer label, bytes, measured s, predicted s,
  whether the row is a prediction rather than calibration); labels end in
  " fp16" for Horovod's compressed allreduce, " collective" for
  multi_worker_mirrored's."""
  fit = calibration(result)
  labels = {result["probe_bytes"]: f"{result['probe_bytes']} B probe"}
  labels.update({b: label for label, b in result["buffers"].items()})
  rows = []
  for run in result["runs"]:
    link = links.link(run["rate"], fit["latency_s"], fit["unshaped_bandwidth"],
                      links.cpu_share(run["hosts"],
                                      result["machine"]["cores"]))
    if run["exchange"] == "collective":
      kinds = ((scaling_model.Recipe(
          exchange="collective", overhead_s=fit["collective_overhead_s"],
          cpu_s_per_byte=fit["collective_cpu_s_per_byte"]),
                "seconds", " collective"),)
    else:
      plain = scaling_model.Recipe(cycle_s=run["cycle_s"],
                                   overhead_s=fit["overhead_s"])
      fp16 = fp16_recipe(plain, fit)
      kinds = ((plain, "seconds", ""), (fp16, "fp16_seconds", " fp16"))
    for recipe, key, suffix in kinds:
      for nbytes, measured in sorted(
          (int(k), v) for k, v in run[key].items()):
        predicted = scaling_model.exchange_seconds(nbytes, run["hosts"], link,
                                                   recipe)
        rows.append((run["rate"], run["hosts"], labels[nbytes] + suffix,
                     nbytes, measured, predicted, run["rate"] != "unshaped"))
  return rows

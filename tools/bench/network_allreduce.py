"""Allreduce-only runs on 2, 3 and 4 shaped hosts: the model's network half.

Horovod ranks on the rig's hosts exchange buffers of resnet20's and the
wide MLP's gradient sizes (allreduce_worker.py) and nothing else, so the
times are the network's and Horovod's, nearly free of the shared machine's
CPU load; tools/scaling_model.py predicts each from inputs taken elsewhere:

- bandwidth and burst of a shaped link: the rate's TCP goodput and the
  token bucket tools/cluster.py gives it (no fit);
- latency per ring step and Horovod's fixed overhead: a line through the
  4-byte allreduce's times on 2, 3 and 4 unshaped hosts;
- the unshaped veth's bandwidth (it has no rate): the largest buffer on 2
  unshaped hosts.

The unshaped runs are therefore calibration; every shaped row (both rates,
every host count and buffer, the 4-byte one included) is a prediction that
the page compares.
"""
import dataclasses
import json
import os
import sys
import tempfile

from tools import scaling_model
from tools.bench import links
from tools.bench import runner

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "allreduce_worker.py")
PROBE_BYTES = 4
TIMEOUT_S = 240


def _run(cluster, hosts, sizes, seconds, log_dir, tag):
  """One horovodrun over the first `hosts` hosts; rank 0's result dict."""
  scratch = tempfile.mkdtemp(prefix=f"allreduce-{tag}-", dir=log_dir)
  out = os.path.join(scratch, "result.json")
  names = [h.name for h in cluster.hosts[:hosts]]
  argv = runner.launcher_argv(
      "horovodrun", hosts,
      [sys.executable, WORKER, f"--sizes={','.join(map(str, sizes))}",
       f"--seconds={seconds}", f"--out={out}"], hosts=names)
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


def measure(host_counts, rate_names, buffers, seconds, log_dir):
  """Runs every (rate, hosts) pair; returns the runs as the JSON keeps them.

  Args:
    host_counts: e.g. (2, 3, 4); the rig has the largest.
    rate_names: links.RATES keys; "unshaped" is always run (calibration).
    buffers: {label: bytes}, e.g. the models' gradient sizes.
    seconds: timed seconds per buffer size and run.
    log_dir: where each run's log goes.
  """
  rates = links.rate_names(",".join(["unshaped", *rate_names]))
  sizes = [PROBE_BYTES, *buffers.values()]
  runs = []
  with links.up(max(host_counts)) as cluster:
    for rate in rates:
      links.shape(cluster, rate)
      for hosts in host_counts:
        result = _run(cluster, hosts, sizes, seconds, log_dir,
                      f"{rate}-{hosts}")
        print(f"  allreduce {rate}, {hosts} hosts: " + ", ".join(
            f"{b} B {r['median_s'] * 1e3:.1f} ms"
            for b, r in result["sizes"].items()), flush=True)
        runs.append({"rate": rate, "hosts": hosts, "cycle_s": result["cycle_s"],
                     "gap_s": result["gap_s"],
                     "seconds": {b: r["median_s"]
                                 for b, r in result["sizes"].items()},
                     "samples": {b: r["samples_s"]
                                 for b, r in result["sizes"].items()}})
  return {"buffers": buffers, "probe_bytes": PROBE_BYTES, "runs": runs}


def calibration(result):
  """{latency_s, overhead_s, unshaped_bandwidth} from the unshaped runs."""
  unshaped = {r["hosts"]: r for r in result["runs"] if r["rate"] == "unshaped"}
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
  return {"latency_s": latency, "overhead_s": overhead,
          "unshaped_bandwidth": largest / max(data_s, 1e-9)}


def comparison(result):
  """Rows of (rate, hosts, buffer label, bytes, measured s, predicted s,
  whether the row is a prediction rather than calibration)."""
  fit = calibration(result)
  labels = {result["probe_bytes"]: f"{result['probe_bytes']} B probe"}
  labels.update({b: label for label, b in result["buffers"].items()})
  rows = []
  for run in result["runs"]:
    link = links.link(run["rate"], fit["latency_s"], fit["unshaped_bandwidth"])
    recipe = scaling_model.Recipe(cycle_s=run["cycle_s"],
                                  overhead_s=fit["overhead_s"])
    for nbytes, measured in sorted(
        (int(k), v) for k, v in run["seconds"].items()):
      predicted = scaling_model.exchange_seconds(nbytes, run["hosts"], link,
                                                 recipe)
      rows.append((run["rate"], run["hosts"], labels[nbytes], nbytes,
                   measured, predicted, run["rate"] != "unshaped"))
  return rows

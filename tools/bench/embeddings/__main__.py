"""The embeddings bench (`make bench-embeddings`): sparse bytes on the links.

  python -m tools.bench.embeddings            # measure, then render
  python -m tools.bench.embeddings --quick    # a short run (the rig test's)
  python -m tools.bench.embeddings render     # docs from the JSON alone

Writes results/embeddings.json and renders docs/EMBEDDINGS.md from it
through EMBEDDINGS.md.template. A run needs root: it brings up its own rig
(tools/rig/cluster.py, cluster "embbench"), shapes every link as the
network bench does (tools/bench/network/links.py) and takes it down at the
end.
"""
import argparse
import json
import os
import sys
import tempfile
import time

from tools import repo
from tools.bench.embeddings import measure
from tools.bench.embeddings import prediction
from tools.bench.embeddings import render
from tools.bench.network import links
from tools.bench.perf import runner

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                       "embeddings.json")
CLUSTER_NAME = "embbench"
RATE = "100mbit"
DEFAULTS = {"hosts": "2,4", "tables": f"{2 ** 16},{2 ** 20}",
            "ids": "256,4096", "steps": 40, "warmup": 5, "rounds": 2}
QUICK = {"hosts": "2", "tables": f"{2 ** 12},{2 ** 18}", "ids": "64,512",
         "steps": 10, "warmup": 3, "rounds": 1}
# A guess at one update's compute, for the jobs' time limits only.
COMPUTE_GUESS_S = 0.2


def _ints(text, flag, least, multiple=1):
  try:
    values = [int(v) for v in str(text).split(",") if v]
  except ValueError:
    values = []
  if not values or min(values) < least or any(v % multiple for v in values):
    raise ValueError(f"{flag}={text!r}: expected comma-separated integers "
                     f">= {least}" + (f", multiples of {multiple}"
                                      if multiple > 1 else ""))
  return values


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("action", nargs="?", default="run",
                      choices=("run", "render"))
  parser.add_argument("--quick", action="store_true",
                      help="small defaults: " + ", ".join(
                          f"--{k}={v}" for k, v in QUICK.items()))
  parser.add_argument("--results", default=RESULTS)
  parser.add_argument("--docs", default=repo.DOCS,
                      help="folder of EMBEDDINGS.md")
  parser.add_argument("--modes", default=",".join(prediction.MODES),
                      help=f"some of {', '.join(prediction.MODES)}; ratios "
                           "need single")
  parser.add_argument("--hosts", help=f"Horovod host counts "
                                      f"(default {DEFAULTS['hosts']})")
  parser.add_argument("--tables",
                      help=f"table rows (default {DEFAULTS['tables']})")
  parser.add_argument("--ids", help="distinct ids per trainer and update, "
                      f"multiples of {prediction.IDS_PER_EXAMPLE} (default "
                      f"{DEFAULTS['ids']})")
  parser.add_argument("--dimension", type=int, default=32)
  parser.add_argument("--steps", type=int,
                      help=f"measured updates (default {DEFAULTS['steps']})")
  parser.add_argument("--warmup", type=int,
                      help=f"untimed updates (default {DEFAULTS['warmup']})")
  parser.add_argument("--rounds", type=int,
                      help=f"rounds (default {DEFAULTS['rounds']})")
  args = parser.parse_args(argv)
  for name, value in (QUICK if args.quick else DEFAULTS).items():
    if getattr(args, name) is None:
      setattr(args, name, value)
  try:
    args.modes = links.names_in(args.modes, prediction.MODES, "--modes")
    args.hosts = _ints(args.hosts, "--hosts", 2)
    args.tables = _ints(args.tables, "--tables", 1)
    args.ids = _ints(args.ids, "--ids", prediction.IDS_PER_EXAMPLE,
                     prediction.IDS_PER_EXAMPLE)
    if max(args.ids) > min(args.tables):
      raise ValueError(f"--ids={max(args.ids)} exceeds --tables="
                       f"{min(args.tables)}: a batch's ids are distinct rows")
    for name in ("dimension", "steps", "warmup", "rounds"):
      if getattr(args, name) < 1:
        raise ValueError(f"--{name}={getattr(args, name)}: must be >= 1")
  except ValueError as e:
    parser.error(str(e))
  return args


def jobs(args):
  """(mode, hosts, configurations) of a round's jobs, in their order.

  A ps job trains one configuration: TensorFlow's Estimator starts its
  gRPC server at every train call, and a process cannot start a second on
  the same port.
  """
  configs = [(rows, ids) for rows in args.tables for ids in args.ids]
  order = [("single", 1, configs)] if "single" in args.modes else []
  order += [(mode, hosts, configs) for hosts in args.hosts
            for mode in ("replicated", "sharded") if mode in args.modes]
  if "ps" in args.modes:
    order += [("ps", measure.PS_HOSTS, [c]) for c in configs]
  return order


def _predicted_s(args, mode, hosts, configs):
  """A generous guess at a job's updates' seconds (its time limit)."""
  rate = links.bits_per_second(RATE) / 8
  total = 0.0
  for _, ids in configs:
    bytes_ = prediction.predict(mode, ids, args.dimension, hosts)
    update = COMPUTE_GUESS_S + max(bytes_["sent"], bytes_["received"]) / rate
    total += update * (args.warmup + args.steps + 2)
  return total


def run_rounds(cluster, args, log_dir):
  """Every job of every round on `cluster` (shaped already); the JSON."""
  settings = {"dimension": args.dimension, "warmup": args.warmup,
              "steps": args.steps}
  samples = {f"{mode}-{hosts}": [] for mode, hosts, _ in jobs(args)}
  for index in range(args.rounds):
    print(f"round {index + 1} of {args.rounds}", flush=True)
    for job in samples.values():
      job.append({})
    for mode, hosts, configs in jobs(args):
      begin = time.time()
      figures = measure.run_job(
          cluster, mode, hosts, configs, settings, log_dir,
          _predicted_s(args, mode, hosts, configs))
      samples[f"{mode}-{hosts}"][-1].update(figures or {})
      for config, row in (figures or {}).items():
        shown = (f"  {mode}-{hosts} {config}: "
                 f"{row['examples_per_sec']:.0f} ex/s")
        if "sent" in row:
          expected = prediction.predict(mode, int(config.split("x")[1]),
                                        args.dimension, hosts)
          shown += (f", sent {row['sent']:.0f} B/update (predicted "
                    f"{expected['sent']:.0f}), received "
                    f"{row['received']:.0f} ({expected['received']:.0f})")
        print(shown, flush=True)
      print(f"  {mode}-{hosts}: {time.time() - begin:.0f} s", flush=True)
  return {"rate": RATE, "dimension": args.dimension, "steps": args.steps,
          "warmup": args.warmup, "rounds": args.rounds, "hosts": args.hosts,
          "tables": args.tables, "ids": args.ids, "samples": samples}


def main(argv=None):
  args = parse_args(sys.argv[1:] if argv is None else argv)
  if args.action == "run":
    log_dir = tempfile.mkdtemp(prefix="estimator_scale_embeddings-")
    print(f"embeddings bench: logs in {log_dir}", flush=True)
    machine = runner.machine_info()
    with links.up(max([*args.hosts, measure.PS_HOSTS]),
                  CLUSTER_NAME) as cluster:
      links.shape(cluster, RATE)
      result = run_rounds(cluster, args, log_dir)
    machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["machine"] = machine
    repo.write(args.results, json.dumps(result, indent=1) + "\n")
  page = render.page(repo.load_json(args.results))
  repo.write(os.path.join(args.docs, "EMBEDDINGS.md"), page)
  print(page)


if __name__ == "__main__":
  main()

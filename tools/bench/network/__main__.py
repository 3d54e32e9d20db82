"""The network bench (`make bench-network`): scaling over shaped links.

  python -m tools.bench.network allreduce   # allreduce-only runs, 2-4 hosts
  python -m tools.bench.network rows        # training rows, 2 hosts
  python -m tools.bench.network render      # docs from the JSON alone

`allreduce` writes results/allreduce.json, `rows` results/rows.json (it
reads the first for the link calibration), and both then render
docs/NETWORK.md and docs/network_scaling.png from those two files through
NETWORK.md.template, which is all `render` does. A run needs root: it
brings up its own rig (tools/rig/cluster.py, cluster "netbench") and takes
it down at the end.
"""
import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time

from tools import repo
from tools.bench.network import allreduce as network_allreduce
from tools.bench.network import analysis
from tools.bench.network import links
from tools.bench.network import plot
from tools.bench.network import render as network_render
from tools.bench.network import rows as network_rows
from tools.bench.perf import runner

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def _ints(text, flag, least):
  try:
    values = [int(v) for v in text.split(",") if v]
  except ValueError:
    values = []
  if not values or min(values) < least:
    raise ValueError(f"{flag}={text!r}: expected comma-separated integers "
                     f">= {least}, e.g. 2,3,4")
  return values


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("action", choices=("allreduce", "rows", "render"))
  parser.add_argument("--results", default=RESULTS,
                      help="folder of the JSON (allreduce.json, rows.json)")
  parser.add_argument("--docs", default=repo.DOCS,
                      help="folder of NETWORK.md and the plot")
  parser.add_argument("--rates", default=",".join(links.RATES),
                      help=f"link rates, some of {', '.join(links.RATES)}")
  parser.add_argument("--hosts", default="2,3,4",
                      help="allreduce: host counts")
  parser.add_argument("--exchanges",
                      default=",".join(network_allreduce.EXCHANGES),
                      help="allreduce: some of "
                           f"{', '.join(network_allreduce.EXCHANGES)}; the "
                           "others' runs in the file are kept")
  parser.add_argument("--seconds", type=float, default=4.0,
                      help="allreduce: timed seconds per buffer and run")
  parser.add_argument("--rounds", type=int, default=2, help="rows: rounds")
  parser.add_argument("--budget_s", type=float, default=3600.0,
                      help="rows: no new round starts once it would end "
                           "past this many seconds")
  parser.add_argument("--window_s", type=float, default=20.0,
                      help="rows: shortest timed window per measurement")
  parser.add_argument("--models", default=",".join(network_rows.MODELS),
                      help=f"rows: some of {', '.join(network_rows.MODELS)}")
  parser.add_argument("--variants", default=",".join(network_rows.VARIANTS),
                      help="rows: some of "
                           f"{', '.join(network_rows.VARIANTS)}")
  args = parser.parse_args(argv)
  try:
    args.rates = links.rate_names(args.rates)
    args.hosts = _ints(args.hosts, "--hosts", 2)
    if 2 not in args.hosts or len(set(args.hosts)) < 2:
      raise ValueError(f"--hosts={','.join(map(str, args.hosts))}: the "
                       "calibration needs 2 and at least one more, e.g. 2,3,4")
    args.models = links.names_in(args.models, network_rows.MODELS,
                                 "--models")
    args.exchanges = links.names_in(args.exchanges,
                                    network_allreduce.EXCHANGES, "--exchanges")
    args.variants = links.names_in(
        args.variants, network_rows.VARIANTS, "--variants")
    if args.rounds < 1:
      raise ValueError(f"--rounds={args.rounds}: must be >= 1")
    if args.window_s <= 0 or args.seconds <= 0:
      raise ValueError("--window_s and --seconds must be > 0")
  except ValueError as e:
    parser.error(str(e))
  return args


def _paths(results, docs):
  return {"allreduce": os.path.join(results, "allreduce.json"),
          "rows": os.path.join(results, "rows.json"),
          "page": os.path.join(docs, "NETWORK.md"),
          "plot": os.path.join(docs, "network_scaling.png")}


def _gradient_bytes():
  return {m: links.gradient_bytes(name)
          for m, name in network_rows.MODELS.items()}


def run_allreduce(args, log_dir, allreduce_path):
  """The allreduce-only runs of `--exchanges`; an earlier file's runs of the
  other exchanges are kept."""
  kept = []
  if os.path.exists(allreduce_path):
    with open(allreduce_path, encoding="utf-8") as f:
      kept = json.load(f)["runs"]
  buffers = _gradient_bytes()
  shaped = [r for r in args.rates if links.RATES[r]]
  result = network_allreduce.measure(args.hosts, shaped, buffers,
                                     args.seconds, log_dir, args.exchanges,
                                     kept)
  result["machine"] = runner.machine_info()
  return result


def run_rows(args, log_dir, allreduce_path):
  if not os.path.exists(allreduce_path):
    raise SystemExit(f"network bench: no link calibration in {allreduce_path}"
                     "; run `python -m tools.bench.network allreduce` first")
  with open(allreduce_path, encoding="utf-8") as f:
    calibration = analysis.calibration(json.load(f))
  gradient_bytes = _gradient_bytes()
  machine = runner.machine_info()
  recipes = {v: network_rows.recipe(v, calibration)
             for v in args.variants}
  with links.up(network_rows.HOSTS) as cluster:
    rounds = network_rows.Rounds(cluster, args.models, args.rates, recipes,
                                 args.window_s, calibration, gradient_bytes,
                                 log_dir)
    start = time.time()
    done = 0
    for index in range(args.rounds):
      if not runner.round_fits(index, time.time() - start, args.budget_s):
        break
      print(f"round {index + 1} of {args.rounds}", flush=True)
      rounds.run_round()
      done += 1
  machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
  return {"machine": machine, "rounds": done, "window_s": args.window_s,
          "hosts": network_rows.HOSTS, "micro_batch": network_rows.MICRO_BATCH,
          "calibration": calibration,
          "gradient_bytes": {m: gradient_bytes[m] for m in args.models},
          "recipes": {v: dataclasses.asdict(r) for v, r in recipes.items()},
          "samples": rounds.samples}


def _render(paths):
  """Renders paths["page"] (and paths["plot"] when rows exist); returns it."""
  rows_result = repo.load_json(paths["rows"])
  allreduce_result = repo.load_json(paths["allreduce"])
  if rows_result is not None and allreduce_result is not None:
    network_render.recalibrate(rows_result, allreduce_result)
  if rows_result is not None:
    plot.plot(rows_result, paths["plot"])
  text = network_render.page(rows_result, allreduce_result,
                             os.path.basename(paths["plot"]))
  repo.write(paths["page"], text)
  return text


def main(argv=None):
  args = parse_args(sys.argv[1:] if argv is None else argv)
  paths = _paths(args.results, args.docs)
  if args.action != "render":
    log_dir = tempfile.mkdtemp(prefix="estimator_scale_network-")
    print(f"network bench {args.action}: logs in {log_dir}", flush=True)
    if args.action == "allreduce":
      result = run_allreduce(args, log_dir, paths["allreduce"])
      out = paths["allreduce"]
    else:
      result, out = run_rows(args, log_dir, paths["allreduce"]), paths["rows"]
    repo.write(out, json.dumps(result, indent=1) + "\n")
  page = _render(paths)
  print(page.split("## Allreduce")[0])


if __name__ == "__main__":
  main()

"""A sharded table's costs against its rows, and the billion-id plan.

  python -m tools.bench.table_costs             # make bench-table-costs
  python -m tools.bench.table_costs --sizes=18,20 --ranks=1,2   # a few
  python -m tools.bench.table_costs --distribution=parameter_server \
      --sizes=18,20,22,24,23 --rounds=1    # make bench-table-costs-ps
  python -m tools.bench.table_costs render      # the page from the JSON

For each size (2^n rows of dimension 16, Adagrad) `--rounds` chains of
Horovod jobs (jobs.py) train, save, restore, re-shard, evaluate and export
the table on 1, 2 and 4 ranks, one fresh set of processes per job; with
`--distribution=parameter_server` the same chains run on a chief, a worker
and 1, 2 and 4 ps tasks, the table partitioned over them. Sizes run
in the order given, and the results file is written after each, so a run
cut short keeps what it measured; a size measured again replaces its
runs, the other sizes' stay. Each size's checkpoints live in a temporary
folder deleted when the size is done. Writes results/table_costs.json and
renders docs/TABLE_COSTS.md (results/table_costs_ps.json for parameter
servers).
"""
import argparse
import json
import os
import shutil
import tempfile

from tools import repo
from tools.bench.perf import runner
from tools.bench.table_costs import jobs
from tools.bench.table_costs import render

SIZES = "18,20,22,24,25,19,21,23"
"""Every other power first: a run stopped early still spans the range."""


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("action", nargs="?", default="run",
                      choices=("run", "render"))
  parser.add_argument("--sizes", default=SIZES,
                      help="powers of two of the tables' rows, in order")
  parser.add_argument("--distribution", default="horovod",
                      choices=("horovod", "parameter_server"))
  parser.add_argument("--ranks", default="1,2,4",
                      help="Horovod ranks, or ps tasks")
  parser.add_argument("--dimension", type=int, default=16)
  parser.add_argument("--batch", type=int, default=4096,
                      help="ids per update over all ranks")
  parser.add_argument("--rounds", type=int, default=2,
                      help="chains per size, each from scratch")
  parser.add_argument("--steps", type=int, default=25)
  parser.add_argument("--warmup", type=int, default=5)
  parser.add_argument("--eval_batches", type=int, default=4)
  parser.add_argument("--process_limit_gib", type=float, default=6.0,
                      help="a job whose ranks would pass this is skipped")
  parser.add_argument("--job_limit_gib", type=float, default=14.0,
                      help="likewise for all of a job's ranks together")
  parser.add_argument("--results", default=None,
                      help="default: results/table_costs.json, or "
                      "table_costs_ps.json for parameter servers")
  parser.add_argument("--page", default=render.PAGE)
  args = parser.parse_args(argv)
  try:
    args.sizes = [int(n) for n in args.sizes.split(",")]
    args.ranks = [int(n) for n in args.ranks.split(",")]
  except ValueError:
    parser.error("--sizes and --ranks: integers joined by ','")
  if min(args.ranks) < 1 or not 1 <= min(args.sizes) <= max(args.sizes) < 40:
    parser.error("--ranks >= 1; --sizes between 1 and 39")
  if args.rounds < 1:
    parser.error(f"--rounds={args.rounds}: must be >= 1")
  if args.results is None:
    args.results = (render.RESULTS if args.distribution == "horovod"
                    else render.RESULTS_PS)
  if args.warmup >= args.steps:
    parser.error(f"--warmup={args.warmup} must be below --steps")
  return args


def run(args):
  """Measures every size, writing the results after each."""
  result = repo.load_json(args.results) or {}
  result["machine"] = runner.machine_info()
  result["settings"] = {k: getattr(args, k) for k in (
      "dimension", "batch", "rounds", "steps", "warmup", "eval_batches",
      "ranks", "distribution",
      "process_limit_gib", "job_limit_gib")}
  result["settings"]["peak_factor_assumed"] = jobs.PEAK_FACTOR
  runs = {int(k): v for k, v in result.get("sizes", {}).items()}
  scratch = tempfile.mkdtemp(prefix="estimator_scale_table_costs-")
  logs = tempfile.mkdtemp(prefix="estimator_scale_table_costs_logs-")
  print(f"table_costs: {result['machine']['summary']}; failed jobs' logs "
        f"in {logs}", flush=True)
  try:
    for power in args.sizes:
      runs[1 << power] = jobs.run_size(args, 1 << power, scratch, logs)
      result["sizes"] = {str(k): runs[k] for k in sorted(runs)}
      result["machine"]["load_average_at_end"] = [
          round(x, 2) for x in os.getloadavg()]
      repo.write(args.results, json.dumps(result, indent=1) + "\n")
  finally:
    shutil.rmtree(scratch, ignore_errors=True)


def main(argv=None):
  args = parse_args(argv)
  if args.action == "run":
    run(args)
  given = "results" if args.distribution == "horovod" else "results_ps"
  print(render.write(path=args.page, **{given: args.results}))


if __name__ == "__main__":
  main()

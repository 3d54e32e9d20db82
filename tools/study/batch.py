"""Click models at global batches of 4K-64K: AdaScale, CowClip and the rules.

  python -m tools.study.batch                      # the whole sweep (Adagrad)
  python -m tools.study.batch --methods AS CowClip --scales 128   # cells
  python -m tools.study.batch --render_only        # the page from runs.jsonl

batch_specs.py says what runs. The runs go through one pool of
single-threaded processes, the S = 1 baseline first, then the largest S
(a sweep cut short keeps the cells the page judges); each result is
appended to runs.jsonl as it comes, `--resume` skips the runs already
there (without it, the cells asked for train anew and the others' runs
stay), and the page (docs/adascale/batch_study.md) always covers every run
in runs.jsonl.
"""
import argparse
import json
import os
import time

from tools import repo
from tools.study import batch_plots
from tools.study import batch_results
from tools.study import batch_specs
from tools.study import click
from tools.study import click_results


def _key(spec_or_run):
  r = spec_or_run
  return (r["optimizer"], r["method"], tuple(r["scales"]), r["seed"])


def kept_runs(held, grid, resume):
  """The runs of runs.jsonl (`held`) an invocation keeps: all with
  --resume, else those outside its `grid`, which it trains anew (a sweep
  of some cells leaves the others' runs on the page)."""
  if resume:
    return list(held)
  redo = {_key(s) for s in grid}
  return [r for r in held if _key(r) not in redo]


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--optimizers", nargs="+", default=["adagrad"],
                      choices=list(batch_specs.OPTIMIZERS))
  parser.add_argument("--methods", nargs="*",
                      default=list(batch_specs.METHODS),
                      choices=list(batch_specs.METHODS),
                      help="S > 1 methods (each optimizer's S = 1 baseline "
                      "always runs; none: the baselines alone)")
  parser.add_argument("--scales", type=int, nargs="+",
                      default=list(batch_specs.SCALES),
                      choices=list(batch_specs.SCALES))
  parser.add_argument("--seeds", type=int, default=1)
  parser.add_argument("--resume", action="store_true",
                      help="keep runs.jsonl and skip the runs it holds")
  parser.add_argument("--render_only", action="store_true",
                      help="train nothing: rebuild study.json and the page "
                      "from runs.jsonl")
  parser.add_argument("--results_dir", default=batch_plots.RESULTS)
  parser.add_argument("--out_dir", default=batch_plots.PAGE_DIR)
  parser.add_argument("--processes", type=int,
                      default=min(2, os.cpu_count() or 1))
  args = parser.parse_args(argv)
  for name in ("seeds", "processes"):
    if getattr(args, name) < 1:
      parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
  return args


def main(argv=None):
  args = parse_args(argv)
  os.makedirs(args.results_dir, exist_ok=True)
  log = os.path.join(args.results_dir, "runs.jsonl")
  grid = [] if args.render_only else batch_specs.grid(
      tuple(args.optimizers), tuple(args.methods), tuple(args.scales),
      args.seeds)
  held = click_results.read_runs(log)
  done = kept_runs(held, grid, args.resume)
  if len(done) < len(held):
    repo.write(log, "".join(json.dumps(r) + "\n" for r in done))
  seen = {_key(r) for r in done}
  todo = [s for s in grid if _key(s) not in seen]
  started = time.time()
  results = done + click.run_all(todo, args.processes, log, started,
                                 batch_specs.priority)
  study = batch_results.build_study(
      results, None if args.render_only else round(time.time() - started),
      args.processes)
  paths = batch_results.write_outputs(args.results_dir, args.out_dir, study)
  print("wrote " + ", ".join(paths))


if __name__ == "__main__":
  main()

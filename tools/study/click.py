"""AdaScale on click data: census and MovieLens, S = 1..64, AUC.

  python -m tools.study.click                     # the whole study
  python -m tools.study.click --tasks census --optimizers adagrad \\
      --methods AS --scales 64 --no_elastic --no_timed   # one cell

click_specs.py says what runs. Every run, the horovodrun jobs of the
elastic and timed rows included, goes through one pool of single-threaded
processes, longest first. Every result is appended to
runs.jsonl as it comes, and `--resume` skips the runs already there, so
a study cut short goes on where it stopped; `--render_only` rebuilds
the page from it alone. Writes study.json from them
and renders docs/adascale/click_study.md (click_results.py,
click_plots.py).

study.json and the page always cover every run in runs.jsonl, whatever
subset this invocation trained, so cells can be run a batch at a time
into scratch directories and folded in with `--merge DIR ...`, which
appends the runs the main runs.jsonl lacks and re-renders:

  python -m tools.study.click --tasks census --methods LSW --scales 2 \
      --no_elastic --no_timed --results_dir /tmp/b1 --out_dir /tmp/b1
  python -m tools.study.click --merge /tmp/b1
"""
import argparse
import json
import multiprocessing
import os
import sys
import time

from tools.study import click_plots
from tools.study import click_results
from tools.study import click_runs
from tools.study import click_specs
from tools.study import pool as study_pool


def _key(spec_or_result):
  r = spec_or_result
  return (r["model"], r["optimizer"], r["method"], tuple(r["scales"]),
          tuple(r["ranks"]), bool(r["timed"]), r["seed"])


def _log(done, total, r, started):
  tau = f", tau {r['tau']:.0f}" if r["tau"] is not None else ""
  print(f"[{done}/{total} {time.time() - started:5.0f}s] "
        f"{click_specs.label(r)}{' timed' if r['timed'] else ''} "
        f"seed={r['seed']}: AUC {r['auc']:.4f}, loss {r['loss']:.4f}, "
        f"{r['updates']} updates{tau}, {r['wall_seconds']:.1f}s", flush=True)


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--tasks", nargs="+", default=list(click_specs.TASKS),
                      choices=list(click_specs.TASKS))
  parser.add_argument("--optimizers", nargs="+",
                      default=[click_specs.MAIN_OPTIMIZER,
                               *click_specs.OTHER_OPTIMIZERS],
                      choices=[click_specs.MAIN_OPTIMIZER,
                               *click_specs.OTHER_OPTIMIZERS])
  parser.add_argument("--methods", nargs="+",
                      default=list(click_specs.METHODS),
                      choices=list(click_specs.METHODS),
                      help="S > 1 methods of the sweep (each optimizer's "
                      "S = 1 baseline always runs)")
  parser.add_argument("--scales", type=int, nargs="+",
                      default=list(click_specs.SCALES))
  parser.add_argument("--seeds", type=int, default=3)
  parser.add_argument("--steps", type=int, default=None,
                      help="T for every task (default: each task's own)")
  parser.add_argument("--no_elastic", action="store_true",
                      help="skip the 2 -> 4 -> 2 rank rows")
  parser.add_argument("--elastic_tasks", nargs="+",
                      default=list(click_specs.TASKS),
                      choices=list(click_specs.TASKS))
  parser.add_argument("--no_timed", action="store_true",
                      help="skip the time-to-AUC rows on 1, 2, 4 ranks")
  parser.add_argument("--timed_tasks", nargs="+", default=["census"],
                      choices=list(click_specs.TASKS))
  parser.add_argument("--resume", action="store_true",
                      help="keep runs.jsonl and skip the runs it holds")
  parser.add_argument("--results_dir", default=click_plots.RESULTS,
                      help="where runs.jsonl and study.json go")
  parser.add_argument("--out_dir", default=click_plots.PAGE_DIR,
                      help="where click_study.md and its figures go")
  parser.add_argument("--render_only", action="store_true",
                      help="train nothing: rebuild study.json and the page "
                      "from runs.jsonl")
  parser.add_argument("--merge", nargs="+", default=None, metavar="DIR",
                      help="train nothing: append to --results_dir's "
                      "runs.jsonl the runs of each DIR/runs.jsonl it lacks, "
                      "then rebuild study.json and the page from them all")
  parser.add_argument("--processes", type=int,
                      default=min(2, os.cpu_count() or 1))
  parser.add_argument("--segment", default=None, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  for name in ("seeds", "processes", "steps"):
    value = getattr(args, name)
    if value is not None and value < 1:
      parser.error(f"--{name} must be >= 1, got {value}")
  if any(not 1 <= s <= click_specs.TIME_SCALE for s in args.scales):
    parser.error(f"--scales must be in 1..{click_specs.TIME_SCALE}, got "
                 f"{args.scales}")
  return args


def run_all(specs, processes, log, started, priority=click_specs.priority):
  """Runs `specs` in a pool of `processes`, in `priority` order; appends
  each result to `log` as it comes (the pool is gone once every result is
  in). A failed run's traceback is printed when it fails; the others go
  on, and the call then exits naming the failed ones."""
  specs = sorted(specs, key=priority)
  results, failed = [], []
  if not specs:  # rendering only: no pool of TensorFlow processes to start
    return results
  with multiprocessing.get_context("spawn").Pool(
      processes, initializer=click_runs.start_worker,
      initargs=(processes,)) as pool:
    for spec, result, error in study_pool.each_run(
        pool, click_runs.train_run, specs):
      if error:
        failed.append(click_specs.label(spec))
        print(f"{failed[-1]} seed={spec['seed']} failed:\n{error}",
              file=sys.stderr, flush=True)
        continue
      results.append(result)
      with open(log, "a", encoding="utf-8") as f:
        f.write(json.dumps(result) + "\n")
      _log(len(results), len(specs), result, started)
  if failed:
    sys.exit(f"{len(failed)} of {len(specs)} runs failed ({', '.join(failed)}):"
             f" their tracebacks are above; the others' results are in {log}")
  return results


def merge_runs(log, others):
  """Appends to `log` every run of the runs.jsonl files `others` that it
  lacks (by cell and seed; the first copy of a run wins, so a batch that
  resumed from `log` adds only its new runs); returns `log`'s runs."""
  runs_now = click_results.read_runs(log)
  seen = {_key(r) for r in runs_now}
  added = []
  for path in others:
    for run in click_results.read_runs(path):
      if _key(run) not in seen:
        seen.add(_key(run))
        added.append(run)
  if added:
    with open(log, "a", encoding="utf-8") as f:
      f.writelines(json.dumps(r) + "\n" for r in added)
  print(f"merged {len(added)} runs into {log} ({len(runs_now)} there)")
  return runs_now + added


def study_tasks(args, results):
  """The settings study.json is built with: every task this invocation
  named or `results` hold, each with every optimizer, method and S (a
  table has rows only where runs are), so a partial invocation never drops
  the cells earlier ones ran."""
  held = {r["model"] for r in results}
  return [click_specs.task_settings(
      model, args.seeds, steps=args.steps,
      elastic=not args.no_elastic and model in args.elastic_tasks,
      timed=not args.no_timed and model in args.timed_tasks)
          for model in click_specs.TASKS
          if model in args.tasks or model in held]


def main(argv=None):
  args = parse_args(argv)
  if args.segment:  # one rank of a segment's horovodrun job
    click_runs.train_segment_job(args.segment)
    return
  tasks = [click_specs.task_settings(
      model, args.seeds, scales=tuple(args.scales), steps=args.steps,
      optimizers=tuple(args.optimizers), methods=tuple(args.methods),
      elastic=not args.no_elastic and model in args.elastic_tasks,
      timed=not args.no_timed and model in args.timed_tasks)
           for model in args.tasks]
  os.makedirs(args.results_dir, exist_ok=True)
  log = os.path.join(args.results_dir, "runs.jsonl")
  train = not (args.render_only or args.merge)
  keep = args.resume or not train
  if args.merge:
    done = merge_runs(log, [os.path.join(d, "runs.jsonl")
                            for d in args.merge])
  else:
    done = click_results.read_runs(log) if keep else []
  if not keep and os.path.exists(log):
    os.remove(log)
  seen = {_key(r) for r in done}
  started = time.time()
  todo = [s for t in tasks for s in click_specs.all_specs(t)
          if _key(s) not in seen and train]
  results = done + run_all(todo, args.processes, log, started)
  study = click_results.build_study(
      results, study_tasks(args, results),
      round(time.time() - started, 1) if train else None,
      args.processes)
  paths = click_results.write_outputs(args.results_dir, args.out_dir, study)
  print(click_plots.markdown(study) + "\nwrote " + ", ".join(paths))


if __name__ == "__main__":
  main()

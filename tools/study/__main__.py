"""AdaScale against linear scaling and LARS, S = 1..128, on two digit tasks.

  python -m tools.study                                  # make study
  horovodrun -np 2 -H localhost:2 python -m tools.study ...

The study of `make study` (specs.py says what it runs). Runs are
independent, so a pool of single-threaded processes (one per core)
shares them, each importing TensorFlow once and training its runs one after
another (runs.py); under horovodrun the ranks share each S instead. Writes
results/study.json and results/traces.json (AdaScale's gain and lr per
update) and renders them into docs/adascale/ (results.py, plots.py).
"""
import argparse
import multiprocessing
import os
import sys
import time

from tools.study import plots
from tools.study import pool as study_pool
from tools.study import results as study_results
from tools.study import runs
from tools.study import specs


def _log(done, total, r, started):
  tau = f", tau {r['tau']:.0f}" if r["tau"] is not None else ""
  ranks = f" ranks={specs.scale_label(r['ranks'])}" if r.get("ranks") else ""
  print(f"[{done}/{total} {time.time() - started:4.0f}s] {r['model']} "
        f"{r['method']:8s} S={specs.scale_label(r['scales']):9s}{ranks} "
        f"seed={r['seed']}: "
        f"accuracy {r['accuracy']:.2f}%, train loss {r['train_loss']:.2e}, "
        f"{r['updates']} updates{tau}, {r['wall_seconds']:.1f}s", flush=True)


def _run_all(run_specs, pool, log_from=None):
  """Results of `run_specs`, from the pool (or this process when it is
  None); the first failed run ends the study with its traceback, since the
  tables need every run."""
  run_specs = sorted(run_specs, key=specs.expected_seconds, reverse=True)
  results = []
  for spec, result, error in study_pool.each_run(pool, runs.train_run,
                                                 run_specs):
    if error:
      sys.exit(f"{spec['model']} {spec['method']} S={spec['scales']} "
               f"seed={spec['seed']} failed:\n{error}")
    results.append(result)
    if log_from is not None:
      _log(len(results), len(run_specs), result, log_from)
  return results


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--results_dir", default=plots.RESULTS,
                      help="where study.json and traces.json go")
  parser.add_argument("--out_dir", default=plots.PAGE_DIR,
                      help="where study.md and the figures go")
  parser.add_argument("--tasks", nargs="+", default=list(specs.TASKS),
                      choices=list(specs.TASKS))
  parser.add_argument("--steps", type=int, default=None,
                      help="T for every task (default: each task's own).")
  parser.add_argument("--learning_rate", type=float, default=None,
                      help="S = 1 rate for every task (default: each own).")
  parser.add_argument("--scales", type=int, nargs="+",
                      default=[1, 2, 4, 8, 16, 32, 64, 128])
  parser.add_argument("--no_elastic", action="store_true",
                      help="Skip the elastic rows.")
  parser.add_argument("--rank_elastic", action="store_true",
                      help="Add digits_mlp's rank-elastic rows: AS and LSW "
                      "on 1 -> 2 -> 4 and 4 -> 2 -> 1 Horovod ranks, one "
                      "horovodrun job per third of T.")
  parser.add_argument("--segment", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--seeds", type=int, default=3)
  parser.add_argument("--micro_batch_size", type=int, default=None,
                      help="Examples per gradient sample (S of them/update; "
                      "default: each task's own).")
  parser.add_argument("--momentum", type=float, default=0.9)
  parser.add_argument("--decay_fractions", type=float, nargs="+",
                      default=[0.5, 0.75])
  parser.add_argument("--decay_rate", type=float, default=0.1)
  parser.add_argument("--warmup_fraction", type=float, default=0.055)
  parser.add_argument("--lars_trust_coefficient", type=float, default=0.02)
  parser.add_argument("--lars_power", type=float, default=2.0,
                      help="LARS's polynomial decay exponent.")
  parser.add_argument("--processes", type=int,
                      default=min(2, os.cpu_count() or 1),
                      help="Worker processes (ignored under Horovod).")
  parser.add_argument("--threads", type=int, default=1, help="intra-op")
  args = parser.parse_args(argv)
  if any(s < 1 for s in args.scales):
    parser.error(f"--scales must all be >= 1, got {args.scales}")
  for name in ("seeds", "steps", "processes", "threads", "micro_batch_size"):
    value = getattr(args, name)
    if value is not None and value < 1:
      parser.error(f"--{name} must be >= 1, got {value}")
  return args


def main(argv=None):
  args = parse_args(argv)
  if args.segment:  # a rank of a rank-elastic run's segment
    runs.train_segment_job(args.segment)
    return
  workers, is_chief = runs.horovod_topology()
  tasks = [specs.task_settings(args, model, workers) for model in args.tasks]
  started = time.time()
  pool = None if workers > 1 else multiprocessing.get_context("spawn").Pool(
      args.processes, initializer=runs.quiet)
  try:
    log_from = started if is_chief else None
    results = specs.run_study(
        tasks, lambda batch: _run_all(batch, pool, log_from), workers)
  finally:  # every run is in, or one failed: stop the rest
    if pool is not None:
      pool.terminate()
      pool.join()
  if is_chief:
    study = {"tasks": [study_results.build_table(results, t) for t in tasks],
             "study_wall_seconds": round(time.time() - started, 1),
             "processes": 1 if workers > 1 else args.processes,
             "workers": workers}
    paths = study_results.write_outputs(args.results_dir, args.out_dir, study,
                                        study_results.traces_of(results))
    print(plots.markdown(study) + "\nwrote " + ", ".join(paths))


if __name__ == "__main__":
  main()

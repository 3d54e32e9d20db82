"""The jobs of one table size, run in turn on one model_dir.

A size's jobs form a chain, each restoring the one before's last save:
the first trains from scratch on the fewest ranks that fit; a job on the
same ranks restores it (the restore); jobs on more ranks restore a save of
fewer (the re-shard: each rank reads its own range of the merged table),
each followed by a plain restore on its own ranks. Jobs with `export`
also evaluate and export, so those are measured once per rank count, on
a table trained by the job itself. Under parameter servers the counts are
of ps tasks, beside a chief and a worker.
"""
import glob
import json
import os
import shutil
import sys
import tempfile
import time

from tools.bench.perf import runner
from tools.bench.ps_memory import procs

GIB = 1 << 30
PROCESS_BASE = 0.6 * GIB
"""A rank's resident bytes with a tiny table: TensorFlow, Horovod, the graph."""
PEAK_FACTOR = 2.5
"""A rank's peak over its share of rows and slots, assumed before any
figure says otherwise: the table, its slot, and room for the save's and
the export's blocks."""
JOB_LIMIT_S = 1200


def table_bytes(rows, dimension, slots=1):
  """Rows and their optimizer slots in float32."""
  return rows * dimension * 4 * (1 + slots)


def predicted_peak(rows, dimension, ranks):
  """The peak resident bytes a rank is assumed to reach."""
  return PROCESS_BASE + PEAK_FACTOR * table_bytes(rows, dimension) / ranks


def fits(rows, dimension, ranks, process_limit, job_limit):
  """Whether a job of `ranks` ranks stays under both memory limits."""
  peak = predicted_peak(rows, dimension, ranks)
  return peak <= process_limit and ranks * peak <= job_limit


def chain(rows, dimension, rank_counts, process_limit, job_limit):
  """[(ranks, from_ranks or None, export)] of one size: a fresh job on the
  fewest ranks that fit, then for each count a restore and, going up, a
  re-shard from the count below. Counts that do not fit are left out."""
  counts = [r for r in sorted(rank_counts)
            if fits(rows, dimension, r, process_limit, job_limit)]
  jobs = []
  for i, ranks in enumerate(counts):
    jobs.append((ranks, counts[i - 1] if i else None, True))
    jobs.append((ranks, ranks, False))
  return jobs


PS_TRAINERS = 2
"""A parameter-server job's training tasks: the chief and one worker; the
chief's figures are the job's."""


def _argv(args, count, command):
  """`command` on `count` Horovod ranks, or on a chief, a worker and
  `count` ps tasks."""
  if args.distribution == "horovod":
    return runner.launcher_argv("horovodrun", count, command)
  return runner.launcher_argv("launch", PS_TRAINERS - 1, command,
                              launch_timeout=JOB_LIMIT_S, ps=count)


def run_job(args, rows, count, model_dir, log_dir, export):
  """Per-rank figures of one job on `count` ranks (ps tasks), or None
  (failed: its log in `log_dir` says why). A parameter-server job also
  has each ps task's peak resident bytes, sampled from outside."""
  out = tempfile.mkdtemp(dir=log_dir, prefix=f"rows{rows}-np{count}-")
  argv = _argv(args, count, [
      sys.executable, "-m", "tools.bench.table_costs.worker",
      f"--model_dir={model_dir}", f"--out_dir={out}", f"--rows={rows}",
      f"--dimension={args.dimension}", f"--batch={args.batch}",
      f"--steps={args.steps}", f"--warmup={args.warmup}",
      f"--eval_batches={args.eval_batches}",
      f"--distribution={args.distribution}"] + (
          ["--export"] if export else []))
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  began = time.monotonic()
  peaks, code = procs.watch(argv, env, os.path.join(out, "log.txt"),
                            timeout=JOB_LIMIT_S + 60)
  ranks_figures = []
  for path in sorted(glob.glob(os.path.join(out, "rank*.json"))):
    with open(path, encoding="utf-8") as f:
      ranks_figures.append(json.load(f))
  reporting = count if args.distribution == "horovod" else 1
  if code != 0 or len(ranks_figures) != reporting:
    print(f"    FAILED ({code}), see {out}/log.txt", flush=True)
    return None
  shutil.rmtree(out)
  return {"wall_seconds": time.monotonic() - began,
          "ranks": sorted(ranks_figures, key=lambda f: f["rank"]),
          "ps_peaks": {name: peak for name, peak in peaks.items()
                       if name.startswith("ps:")}}


def run_size(args, rows, scratch, log_dir):
  """`args.rounds` chains of one size, each on a model_dir of its own,
  deleted once the chain is done; the logs of failed jobs are kept in
  `log_dir`."""
  runs = []
  for round_ in range(args.rounds):
    runs.extend(_chain_once(args, rows, scratch, log_dir, round_))
  return runs


def _chain_once(args, rows, scratch, log_dir, round_):
  model_dir = tempfile.mkdtemp(dir=scratch, prefix=f"rows{rows}-")
  runs = []
  try:
    for ranks, from_ranks, export in chain(
        rows, args.dimension, args.ranks, args.process_limit_gib * GIB,
        args.job_limit_gib * GIB):
      kind = ("fresh" if from_ranks is None else
              "restore" if from_ranks == ranks else "reshard")
      unit = "ranks" if args.distribution == "horovod" else "ps tasks"
      print(f"  round {round_ + 1}: {rows:,} rows, {ranks} {unit}, {kind}"
            f"{'' if kind != 'reshard' else f' from {from_ranks}'}",
            flush=True)
      job = run_job(args, rows, ranks, model_dir, log_dir, export)
      runs.append({"rows": rows, "ranks": ranks, "kind": kind,
                   "from_ranks": from_ranks, "round": round_, "job": job})
      if job is None:
        break  # the next job would restore a save that was never written
  finally:
    shutil.rmtree(model_dir, ignore_errors=True)
  return runs

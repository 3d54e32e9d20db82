"""What re-sharding a dynamic table costs: seconds, and each rank's memory.

  python -m tools.bench.dynamic.reshard [--capacity=1048576] [--dimension=32]

Three Horovod jobs on one model_dir, each a fresh set of processes: 2
ranks fill a table (Adagrad, so one slot per row) to 90 % of its capacity
in one update and save it; 3 ranks restore it and re-shard (each id's row
to its owner among 3) before their first update; 3 ranks restore the
3-rank save, which needs no re-sharding. In the last two each rank
records its resident memory as its session starts, before the restore,
and its peak from there to its first update (the kernel's high-water mark,
reset first): what the restore and the re-shard add on top of what the
rank already held, against the restore alone. Writes the figures into
results/dynamic.json ("reshard") and renders docs/DYNAMIC.md.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

from tools import repo
from tools.bench.dynamic import render
from tools.bench.perf import runner

RANKS_BEFORE, RANKS_AFTER = 2, 3
FILL = 0.9


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--capacity", type=int, default=1 << 20)
  parser.add_argument("--dimension", type=int, default=32)
  parser.add_argument("--worker", action="store_true",
                      help="(internal) run as one Horovod rank")
  parser.add_argument("--model_dir")
  parser.add_argument("--out_dir")
  parser.add_argument("--steps", type=int, default=1)
  parser.add_argument("--results", default=render.RESULTS)
  parser.add_argument("--page", default=render.PAGE)
  args = parser.parse_args(argv)
  for name in ("capacity", "dimension"):
    if getattr(args, name) < 1:
      parser.error(f"--{name}={getattr(args, name)}: must be >= 1")
  return args


def _status(field):
  """A field of /proc/self/status, in bytes."""
  with open("/proc/self/status", encoding="ascii") as f:
    for line in f:
      if line.startswith(field + ":"):
        return int(line.split()[1]) * 1024
  raise RuntimeError(f"no {field} in /proc/self/status")


def _batch(capacity):
  """The ids of the one update that fills the table: 90 % of its capacity,
  a multiple of both rank counts."""
  size = int(capacity * FILL) // 6 * 6
  return np.random.RandomState(0).randint(0, 1 << 60, size, dtype=np.int64)


def worker(args):
  """One rank: trains to --steps; records its memory around the restore."""
  from absl import logging  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import estimator_scale as es  # pylint: disable=g-import-not-at-top
  logging.set_verbosity(logging.INFO)  # the re-shard's line and its seconds

  class Model(es.BinaryClassifierModel):
    name = None

    def logits(self, features, training, params):
      vectors = es.dynamic_embedding(features["ids"], args.dimension,
                                     args.capacity, name="table")
      return tf.compat.v1.layers.dense(vectors, 1, name="logit")

    def serving_features(self):
      return {"ids": tf.TensorSpec([], tf.int64)}

  class Memory(tf.compat.v1.train.SessionRunHook):
    """The caller's hooks start before the backend's, which restore."""

    def after_create_session(self, session, coord):
      with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")  # the high-water mark starts again from here
      self.before = _status("VmRSS")

    def before_run(self, run_context):
      if not hasattr(self, "peak"):
        self.peak = _status("VmHWM")

  ids = _batch(args.capacity)
  estimator = es.make_estimator(
      Model(), model_dir=args.model_dir, distribution="horovod",
      training_config=es.TrainingConfig(optimizer="adagrad"), random_seed=0)
  memory = Memory()
  estimator.train(es.inputs.from_arrays(
      {"ids": ids}, (ids & 1).astype(np.int64), len(ids), seed=None),
                  hooks=[memory], max_steps=args.steps)
  rank = estimator.topology.worker_index
  with open(os.path.join(args.out_dir, f"rank{rank}.json"), "w",
            encoding="utf-8") as f:
    json.dump({"before": memory.before, "peak": memory.peak}, f)


def _job(args, ranks, steps, model_dir, scratch):
  """(seconds the re-shard took or None, per-rank memory) of one job."""
  out = tempfile.mkdtemp(dir=scratch)
  argv = runner.launcher_argv("horovodrun", ranks, [
      sys.executable, "-m", "tools.bench.dynamic.reshard", "--worker",
      f"--capacity={args.capacity}", f"--dimension={args.dimension}",
      f"--model_dir={model_dir}", f"--out_dir={out}", f"--steps={steps}"])
  proc = subprocess.run(argv, capture_output=True, text=True, check=False)
  if proc.returncode:
    raise SystemExit(f"{' '.join(argv)} failed:\n{proc.stderr[-3000:]}")
  seconds = re.findall(r"re-sharded from \d+ to \d+ ranks in ([\d.]+) s",
                       proc.stdout + proc.stderr)
  ranks_memory = []
  for path in sorted(glob.glob(os.path.join(out, "rank*.json"))):
    with open(path, encoding="utf-8") as f:
      ranks_memory.append(json.load(f))
  return (float(seconds[0]) if seconds else None), ranks_memory


def share_bytes(capacity, dimension, ranks):
  """A rank's share of the table: its rows, their Adagrad slot and the
  per-row id, last update, count and flag."""
  return capacity / ranks * (2 * 4 * dimension + 8 + 8 + 8 + 1)


def main(argv=None):
  args = parse_args(argv)
  if args.worker:
    worker(args)
    return
  scratch = tempfile.mkdtemp(prefix="estimator_scale_reshard_bench-")
  model_dir = os.path.join(scratch, "model")
  _job(args, RANKS_BEFORE, 1, model_dir, scratch)
  seconds, moved = _job(args, RANKS_AFTER, 2, model_dir, scratch)
  _, restored = _job(args, RANKS_AFTER, 3, model_dir, scratch)
  share = share_bytes(args.capacity, args.dimension, RANKS_AFTER)

  def added(ranks_memory):
    return [round((m["peak"] - m["before"]) / share, 2) for m in ranks_memory]
  figures = {
      "capacity": args.capacity, "dimension": args.dimension,
      "ids": len(_batch(args.capacity)), "ranks": [RANKS_BEFORE, RANKS_AFTER],
      "seconds": seconds, "share_bytes": share,
      "peak_over_share": added(moved),
      "restore_only_peak_over_share": added(restored),
      "machine": runner.machine_info()}
  print(json.dumps(figures, indent=1))
  results = repo.load_json(args.results) or {}
  results["reshard"] = figures
  repo.write(args.results, json.dumps(results, indent=1) + "\n")
  render.write(args.results, args.page)


if __name__ == "__main__":
  main()

"""Delta saves against full ones, of a table in one job, as the table grows
and as the rows touched between saves do.

  python -m tools.bench.delta_saves --out=docs/delta_saves.json  # the sweep
  python -m tools.bench.delta_saves --log2_rows=18 --touched=0.01  # seconds
  python -m tools.bench.delta_saves --ranks=2,4 --out=...  # Horovod ranks
  python -m tools.bench.delta_saves --table=static ...  # es.sharded_embedding

For each size and fraction touched, one process trains a table of
2^log2_rows x 16 with Adagrad (dynamic, or with --table=static the table
`es.sharded_embedding` makes: whole in one process, sharded on ranks),
saving every `--steps_per_save` updates, one save in `--full_every` full
(`full_checkpoint_every`); every update looks up ids never seen before, as
many as make the rows touched between two saves `--touched` of the table,
which never fills (so none is evicted; a static table's ids go round its
rows). Each save's time is read from Estimator's own log lines around it
(the save proper, what a training step waits for; on Horovod ranks, rank 0's
line for the tables' save, its write, the wait for the other ranks and the
merge), and its bytes from its files; a size's full and delta saves are
measured in the same run, so a busy disk slows both. At `--check_log2_rows`
the full checkpoint and its deltas are restored in a new job and compared
with the full save of the same step, bit for bit: the figures are only worth
having if the delta saves what the full save does (on ranks,
tests/integration/test_dynamic_embedding_multiprocess.py checks it). Writes
every run to --out (JSON) as it finishes, for docs/performance.md and
docs/TABLE_COSTS.md.
"""
import argparse
import json
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from absl import logging as absl_logging
import numpy as np
import tensorflow as tf

import estimator_scale as es
from tools.bench.perf import runner

DIMENSION = 16
_SAVING = re.compile(r"Saving checkpoints for (\d+) ")
_SAVED = re.compile(r"Calling checkpoint listeners after saving checkpoint "
                    r"(\d+)")
_RANKS_SAVED = re.compile(r"Sharded tables saved (whole|as a delta) at step "
                          r"(\d+) on \d+ ranks in ([\d.]+) s")


class _SaveTimes(logging.Handler):
  """{step: seconds} of each save, from Estimator's lines around it."""

  def __init__(self):
    super().__init__()
    self.started, self.seconds = {}, {}
    self.ranks = {"full": {}, "delta": {}}  # {step: seconds} of the tables

  def emit(self, record):
    message = record.getMessage()
    match = _RANKS_SAVED.search(message)
    if match:
      kind = "full" if match.group(1) == "whole" else "delta"
      self.ranks[kind][int(match.group(2))] = float(match.group(3))
    for pattern, started in ((_SAVING, True), (_SAVED, False)):
      match = pattern.search(message)
      if match:
        step = int(match.group(1))
        if started:
          self.started[step] = record.created
        elif step in self.started:
          self.seconds[step] = record.created - self.started.pop(step)


class _Table(es.BinaryClassifierModel):
  name = None

  def __init__(self, rows, table="dynamic"):
    self.rows, self.table = rows, table

  def logits(self, features, training, params):
    if self.table == "static":
      vectors = es.sharded_embedding(features["id"] % self.rows, self.rows,
                                     DIMENSION, name="ids")
    else:
      vectors = es.dynamic_embedding(features["id"], DIMENSION,
                                     capacity=self.rows, name="ids")
    return tf.keras.layers.Dense(1, name="logit")(vectors)

  def serving_features(self):
    return {"id": tf.TensorSpec([], tf.int64)}


def _input_fn(batch, steps, table="dynamic", rows=None):
  """`batch` ids never seen before at every update; a static table's go
  round its `rows`, bounding the arrays (constants copied into each rank's
  graph and saved with it)."""
  count = batch * steps if table == "dynamic" else min(batch * steps, rows)
  ids = np.arange(1, 1 + count, dtype=np.int64)
  return es.inputs.from_arrays({"id": ids}, (ids % 3 == 0).astype(np.int64),
                               batch)


def _bytes(prefix):
  return sum(os.path.getsize(p) for p in tf.io.gfile.glob(prefix + ".*"))


def measure(log2_rows, touched, steps_per_save, full_every, saves, model_dir,
            distribution="none", table="dynamic"):
  """{"full": [(step, seconds, bytes)], "delta": [...]}."""
  rows = 1 << log2_rows
  ranks = int(os.environ.get("HOROVOD_SIZE", "1"))  # a batch for each
  batch = max(ranks, int(rows * touched) // steps_per_save // ranks * ranks)
  steps = steps_per_save * saves
  estimator = es.make_estimator(
      _Table(rows, table), model_dir=model_dir, random_seed=0,
      distribution=distribution,
      save_checkpoints_steps=steps_per_save, full_checkpoint_every=full_every,
      keep_checkpoint_max=saves,
      training_config=es.TrainingConfig(
          optimizer="adagrad", learning_rate=0.1))
  times = _SaveTimes()
  # The lines the times are read from: Estimator's, and the framework's
  # (absl's logger) on ranks.
  loggers = [tf.get_logger(), absl_logging.get_absl_logger()]
  levels = [logger.level for logger in loggers]
  for logger in loggers:
    logger.setLevel(logging.INFO)
    logger.addHandler(times)
  try:
    estimator.train(_input_fn(batch, steps, table, rows), max_steps=steps)
  finally:
    for logger, level in zip(loggers, levels):
      logger.removeHandler(times)
      logger.setLevel(level)
  if distribution == "horovod":
    return _on_ranks(times.ranks, model_dir)
  found = {"full": [], "delta": []}
  for step, seconds in sorted(times.seconds.items()):
    full = os.path.join(model_dir, f"model.ckpt-{step}")
    deltas = tf.io.gfile.glob(os.path.join(model_dir, "deltas", "*",
                                           f"delta-{step}.index"))
    if step and deltas:  # the last step has both: its delta, then its full
      found["delta"].append((step, seconds, _bytes(deltas[0][:-6])))
    elif step and tf.io.gfile.exists(full + ".index"):
      found["full"].append((step, seconds, _bytes(full)))
  return found


def _on_ranks(seconds, model_dir):
  """`measure`'s figures from rank 0's lines of the tables' saves."""
  tables = os.path.join(model_dir, "sharded_tables")
  found = {"full": [], "delta": []}
  for step, took in sorted(seconds["delta"].items()):
    (delta,) = tf.io.gfile.glob(os.path.join(tables, "deltas", "*",
                                             f"delta-{step}.index"))
    found["delta"].append((step, took, _bytes(delta[:-len(".index")])))
  for step, took in sorted(seconds["full"].items()):
    full = os.path.join(tables, f"ckpt-{step}")
    if tf.io.gfile.exists(full + ".index"):  # not dropped since
      found["full"].append((step, took, _bytes(full)))
  return found


def _on_horovod(args, ranks, log2_rows, touched, model_dir):
  """`measure` run by `ranks` Horovod ranks on this host (this module
  again, under horovodrun); rank 0 writes its figures."""
  out = os.path.join(model_dir, "found.json")
  argv = runner.launcher_argv("horovodrun", ranks, [
      sys.executable, "-m", "tools.bench.delta_saves",
      f"--log2_rows={log2_rows}", f"--touched={touched}",
      f"--steps_per_save={args.steps_per_save}",
      f"--full_every={args.full_every}", f"--saves={args.saves}",
      f"--table={args.table}", f"--rank_of_job={model_dir}"])
  subprocess.run(argv, check=True, timeout=3600,
                 env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  with open(out, encoding="utf-8") as f:
    return json.load(f)


def _rank_of_job(args):
  """One rank of `_on_horovod`'s job."""
  model_dir = args.rank_of_job
  found = measure(args.log2_rows[0], args.touched[0], args.steps_per_save,
                  args.full_every, args.saves, model_dir, "horovod",
                  args.table)
  if os.environ.get("HOROVOD_RANK") == "0":
    with open(os.path.join(model_dir, "found.json"), "w",
              encoding="utf-8") as f:
      json.dump(found, f)


def _tensors(prefix):
  reader = tf.train.load_checkpoint(prefix)
  return {name: reader.get_tensor(name)
          for name in reader.get_variable_to_shape_map()}


class _Restored(tf.compat.v1.train.SessionRunHook):
  """The global variables' values as the session restored them."""

  def __init__(self):
    self.values = None

  def after_create_session(self, session, coord):
    variables = tf.compat.v1.global_variables()
    self.values = dict(zip([v.op.name for v in variables],
                           session.run(variables)))


def check_restore(log2_rows, touched, steps_per_save, full_every, found,
                  model_dir, table="dynamic"):
  """Whether the last full checkpoint before the end, restored with its
  deltas, equals the full save the session's end wrote at the last step
  (which also has a delta): {"base", "step", "variables", "equal"}."""
  step = max(s for s, _, _ in found["delta"])
  base = max(s for s, _, _ in found["full"] if s < step)
  last = os.path.join(model_dir, f"model.ckpt-{step}")
  full = _tensors(last)
  for path in tf.io.gfile.glob(last + ".*"):  # a restore must not pick it
    tf.io.gfile.remove(path)
  tf.compat.v1.train.update_checkpoint_state(
      model_dir, os.path.join(model_dir, f"model.ckpt-{base}"))
  restored = _Restored()
  rows = 1 << log2_rows
  batch = max(1, int(rows * touched) // steps_per_save)
  es.make_estimator(
      _Table(rows, table), model_dir=model_dir, random_seed=0,
      save_checkpoints_steps=steps_per_save, full_checkpoint_every=full_every,
      training_config=es.TrainingConfig(
          optimizer="adagrad", learning_rate=0.1)
  ).train(_input_fn(batch, step + 1, table, rows), hooks=[restored],
          max_steps=step + 1)
  equal = set(full) <= set(restored.values) and all(
      np.array_equal(restored.values[name], value)
      for name, value in full.items())
  return {"log2_rows": log2_rows, "touched": touched, "base": base,
          "step": step, "variables": len(full), "equal": bool(equal)}


def summary(log2_rows, touched, found, ranks=1):
  """One run's medians; the saves themselves are kept beside them."""
  full = statistics.median(s for _, s, _ in found["full"])
  delta = statistics.median(s for _, s, _ in found["delta"])
  return {"log2_rows": log2_rows, "rows": 1 << log2_rows,
          "touched": touched, "ranks": ranks,
          "full_s": full, "delta_s": delta, "ratio": delta / full,
          "full_bytes": statistics.median(b for _, _, b in found["full"]),
          "delta_bytes": statistics.median(b for _, _, b in found["delta"]),
          "saves": found}


def _ints(text):
  return [int(v) for v in text.split(",")]


def _floats(text):
  return [float(v) for v in text.split(",")]


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--log2_rows", type=_ints, default=_ints(
      "18,19,20,21,22,23"))
  parser.add_argument("--touched", type=_floats, default=[0.01, 0.1])
  parser.add_argument("--steps_per_save", type=int, default=10)
  parser.add_argument("--full_every", type=int, default=2)
  parser.add_argument("--saves", type=int, default=9,
                      help="odd with --full_every=2, so the last step has "
                      "a delta and the end's full save to compare it to; "
                      "a dynamic table's, at most 1 / --touched")
  parser.add_argument("--check_log2_rows", type=int, default=18)
  parser.add_argument("--ranks", type=_ints, default=[1],
                      help="Horovod ranks on this host of each run (1: one "
                      "process)")
  parser.add_argument("--table", choices=("dynamic", "static"),
                      default="dynamic")
  parser.add_argument("--rank_of_job", default=None,
                      help="(set by the bench for the ranks it starts: "
                      "their model_dir)")
  parser.add_argument("--out", default=None)
  args = parser.parse_args()
  if args.rank_of_job:
    _rank_of_job(args)
    return
  # Every id is new, so a dynamic table evicts none; a static table's ids
  # go round its rows.
  if args.table == "dynamic" and max(args.touched) * args.saves > 1:
    parser.error("--touched x --saves must not pass the whole table")
  result = {"table": args.table, "dimension": DIMENSION,
            "optimizer": "adagrad",
            "steps_per_save": args.steps_per_save,
            "full_every": args.full_every, "saves_per_run": args.saves,
            "runs": [], "restore_check": None}
  for ranks in args.ranks:
    for log2_rows in args.log2_rows:
      for touched in args.touched:
        _run(args, result, ranks, log2_rows, touched)


def _run(args, result, ranks, log2_rows, touched):
  """One size's and fraction's run, added to `result` (and --out)."""
  model_dir = tempfile.mkdtemp(prefix="delta-saves-")
  try:
    if ranks > 1:
      found = _on_horovod(args, ranks, log2_rows, touched, model_dir)
    else:
      found = measure(log2_rows, touched, args.steps_per_save,
                      args.full_every, args.saves, model_dir,
                      table=args.table)
    if (ranks == 1 and log2_rows == args.check_log2_rows and
        not result["restore_check"]):
      result["restore_check"] = check_restore(
          log2_rows, touched, args.steps_per_save, args.full_every, found,
          model_dir, args.table)
      print("restore check:", result["restore_check"], flush=True)
  finally:  # gigabytes of checkpoints
    shutil.rmtree(model_dir, ignore_errors=True)
  run = summary(log2_rows, touched, found, ranks)
  result["runs"].append(run)
  print(f"2^{log2_rows} x {DIMENSION} rows on {ranks} rank(s), "
        f"{touched:.0%} touched: full {run['full_s']:.3f} s "
        f"({run['full_bytes'] / 2**20:.0f} MiB, {len(found['full'])} saves),"
        f" delta {run['delta_s']:.3f} s ({run['delta_bytes'] / 2**20:.1f} "
        f"MiB, {len(found['delta'])} saves): delta / full = "
        f"{run['ratio']:.3f}", flush=True)
  if args.out:  # each run as it ends: a cut sweep keeps what it had
    with open(args.out, "w") as f:
      json.dump(result, f, indent=1)


if __name__ == "__main__":
  main()

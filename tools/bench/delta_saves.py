"""A delta save against a full one, of the same dynamic table in one job.

  python -m tools.bench.delta_saves                  # 2^23 rows, 1 % touched
  python -m tools.bench.delta_saves --log2_rows=18   # seconds: is it working?

One process trains a dynamic table of 2^log2_rows x 16 with Adagrad, saving
every `--steps_per_save` updates, one save in `--full_every` full
(`full_checkpoint_every`); each update looks up `--batch` new ids, so the
rows touched between two saves are `--touched` of the table. Each save's
time is read from Estimator's own log lines around it (the save proper,
what a training step waits for), and its bytes from its files. Prints the
median delta and full save and their ratio, both measured in this run,
and writes them to --out (JSON) for docs/performance.md.
"""
import argparse
import json
import logging
import os
import re
import shutil
import statistics
import tempfile

import numpy as np
import tensorflow as tf

import estimator_scale as es

DIMENSION = 16
_SAVING = re.compile(r"Saving checkpoints for (\d+) ")
_SAVED = re.compile(r"Calling checkpoint listeners after saving checkpoint "
                    r"(\d+)")


class _SaveTimes(logging.Handler):
  """{step: seconds} of each save, from Estimator's lines around it."""

  def __init__(self):
    super().__init__()
    self.started, self.seconds = {}, {}

  def emit(self, record):
    message = record.getMessage()
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

  def __init__(self, rows):
    self.rows = rows

  def logits(self, features, training, params):
    vectors = es.dynamic_embedding(features["id"], DIMENSION,
                                   capacity=self.rows, name="ids")
    return tf.keras.layers.Dense(1, name="logit")(vectors)

  def serving_features(self):
    return {"id": tf.TensorSpec([], tf.int64)}


def _input_fn(batch, steps):
  """`batch` ids never seen before at every update."""
  ids = np.arange(1, 1 + batch * steps, dtype=np.int64)
  return es.inputs.from_arrays({"id": ids}, (ids % 3 == 0).astype(np.int64),
                               batch)


def _bytes(prefix):
  return sum(os.path.getsize(p) for p in tf.io.gfile.glob(prefix + ".*"))


def measure(log2_rows, touched, steps_per_save, full_every, saves, model_dir):
  """{"full": [(step, seconds, bytes)], "delta": [...]}."""
  rows = 1 << log2_rows
  batch = max(1, int(rows * touched) // steps_per_save)
  steps = steps_per_save * saves
  estimator = es.make_estimator(
      _Table(rows), model_dir=model_dir, random_seed=0,
      save_checkpoints_steps=steps_per_save, full_checkpoint_every=full_every,
      keep_checkpoint_max=saves,
      training_config=es.TrainingConfig(
          optimizer="adagrad", schedule=es.Schedule(learning_rate=0.1)))
  times = _SaveTimes()
  logger = tf.get_logger()
  level = logger.level
  logger.setLevel(logging.INFO)  # the lines the times are read from
  logger.addHandler(times)
  try:
    estimator.train(_input_fn(batch, steps), max_steps=steps)
  finally:
    logger.removeHandler(times)
    logger.setLevel(level)
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


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--log2_rows", type=int, default=23)
  parser.add_argument("--touched", type=float, default=0.01)
  parser.add_argument("--steps_per_save", type=int, default=10)
  parser.add_argument("--full_every", type=int, default=4)
  parser.add_argument("--saves", type=int, default=12)
  parser.add_argument("--out", default=None)
  args = parser.parse_args()
  model_dir = tempfile.mkdtemp(prefix="delta-saves-")
  try:
    found = measure(args.log2_rows, args.touched, args.steps_per_save,
                    args.full_every, args.saves, model_dir)
  finally:  # gigabytes of checkpoints
    shutil.rmtree(model_dir, ignore_errors=True)
  full = statistics.median(s for _, s, _ in found["full"])
  delta = statistics.median(s for _, s, _ in found["delta"])
  full_bytes = statistics.median(b for _, _, b in found["full"])
  delta_bytes = statistics.median(b for _, _, b in found["delta"])
  result = dict(vars(args), full_s=full, delta_s=delta,
                full_bytes=full_bytes, delta_bytes=delta_bytes,
                ratio=delta / full, saves=found)
  print(f"2^{args.log2_rows} x {DIMENSION} rows with Adagrad, "
        f"{args.touched:.0%} touched between saves: full save "
        f"{full:.3f} s ({full_bytes / 2**20:.0f} MiB, "
        f"{len(found['full'])} saves), delta {delta:.3f} s "
        f"({delta_bytes / 2**20:.1f} MiB, {len(found['delta'])} saves): "
        f"delta / full = {delta / full:.3f}")
  print("each save (step, s, MiB): full " + ", ".join(
      f"({s}, {t:.2f}, {b / 2**20:.0f})" for s, t, b in found["full"]) +
        "; delta " + ", ".join(f"({s}, {t:.3f}, {b / 2**20:.1f})"
                               for s, t, b in found["delta"]))
  if args.out:
    with open(args.out, "w") as f:
      json.dump(result, f, indent=1)


if __name__ == "__main__":
  np.set_printoptions(precision=3)
  main()

"""One rank of a table-costs job: trains, saves, evaluates, exports.

Run by jobs.py under horovodrun (a table sharded over the ranks) or the
launcher (a chief, a worker and ps tasks: a table partitioned over the ps
tasks), never by hand. Each rank (the chief and the worker) writes its
own figures to `<out_dir>/rank<r>.json`; the job's costs are read from
them. A ps task serves inside `train()` until the launcher stops it.

The seconds come from where a user would wait: a step is one session run;
the restore is `train()` up to the first step (graph, session and the
reading of the rows, whichever hook or session creator reads them); the
full save
is what train() takes after its last step returns, the ranks writing
their rows and rank 0 merging them; evaluation and export are their calls'
wall time. Peak resident memory is the kernel's high-water mark, reset
between phases (/proc/self/clear_refs), so each phase has its own peak.
"""
import argparse
import json
import os
import statistics
import time

import numpy as np

from tools.bench.ps_memory import procs

START = time.monotonic()


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--distribution", default="horovod",
                      choices=("horovod", "parameter_server"))
  parser.add_argument("--model_dir", required=True)
  parser.add_argument("--out_dir", required=True)
  parser.add_argument("--rows", type=int, required=True)
  parser.add_argument("--dimension", type=int, default=16)
  parser.add_argument("--batch", type=int, default=4096,
                      help="ids per update over all ranks")
  parser.add_argument("--steps", type=int, default=20,
                      help="updates this job trains")
  parser.add_argument("--warmup", type=int, default=5,
                      help="first updates left out of the step time")
  parser.add_argument("--eval_batches", type=int, default=4)
  parser.add_argument("--export", action="store_true",
                      help="evaluate and export after training")
  parser.add_argument("--seed", type=int, default=0)
  return parser.parse_args(argv)


def peak():
  """This process's resident high-water mark, in bytes."""
  return procs.peak_bytes(os.getpid())


def reset_peak():
  """Starts the high-water mark again from what is resident now."""
  with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
    f.write("5")


def folder_bytes(path):
  """Bytes of every file under `path` (0: none)."""
  total = 0
  for root, _, files in os.walk(path):
    total += sum(os.path.getsize(os.path.join(root, name)) for name in files)
  return total


def checkpoint_bytes(model_dir, step):
  """Bytes of the files of the save at `step`: the Estimator's checkpoint
  and the tables' merged one (the ranks' parts, where still there)."""
  mark = f"ckpt-{step}"
  total = 0
  for root, _, files in os.walk(model_dir):
    if "export" in root:
      continue
    total += sum(os.path.getsize(os.path.join(root, name)) for name in files
                 if mark + "." in name or mark + "-" in name)
  return total


def data(rows, examples, seed):
  """Ids drawn uniformly over the table, so every update touches about as
  many rows whatever the table's size; labels carry no signal (the costs,
  not the model, are measured)."""
  rng = np.random.RandomState(seed)
  ids = rng.randint(0, rows, size=(examples, 1)).astype(np.int64)
  return {"ids": ids}, rng.randint(0, 2, size=examples).astype(np.int64)


def main(argv=None):
  args = parse_args(argv)
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  import estimator_scale as es

  class OneTable(es.BinaryClassifierModel):
    name = None

    def logits(self, features, training, params):
      if args.distribution == "horovod":
        vectors = es.sharded_embedding(features["ids"], args.rows,
                                       args.dimension, name="table")
      else:  # partitioned over the ps tasks by the framework
        table = tf.compat.v1.get_variable("table",
                                          [args.rows, args.dimension])
        vectors = tf.nn.embedding_lookup(table, features["ids"])
      net = tf.reshape(vectors, [-1, args.dimension])
      return tf.keras.layers.Dense(1, name="logit")(net)

    def serving_features(self):
      return {"ids": tf.TensorSpec([1], tf.int64)}

  class Clock(tf.compat.v1.train.SessionRunHook):
    """Each step's seconds and the session's start."""

    def __init__(self):
      self.steps, self.session_at, self.first_run_at = [], None, None
      self.last_end = None

    def after_create_session(self, session, coord):
      self.session_at = time.monotonic()

    def before_run(self, run_context):
      self.began = time.monotonic()
      if self.first_run_at is None:
        self.first_run_at = self.began

    def after_run(self, run_context, run_values):
      self.last_end = time.monotonic()
      self.steps.append(self.last_end - self.began)

  estimator = es.make_estimator(
      OneTable(), model_dir=args.model_dir, distribution=args.distribution,
      training_config=es.TrainingConfig(optimizer="adagrad"),
      random_seed=0, save_checkpoints_steps=10**9)
  latest = tf.train.latest_checkpoint(args.model_dir)
  step_before = int(latest.rsplit("-", 1)[1]) if latest else 0
  features, labels = data(args.rows, args.batch * args.steps, args.seed)
  clock = Clock()
  reset_peak()
  began = time.monotonic()
  estimator.train(es.inputs.from_arrays(features, labels, args.batch),
                  hooks=[clock], max_steps=step_before + args.steps)
  trained = time.monotonic()
  rank = estimator.topology.worker_index
  if args.distribution != "horovod" and rank:
    return  # the chief's figures are the job's; this worker may find the
    # steps done before its session starts
  timed = clock.steps[args.warmup:] or clock.steps
  figures = {
      "rank": rank, "restored": latest is not None,
      "step_before": step_before,
      "import_seconds": began - START,
      "graph_seconds": clock.session_at - began,
      "session_seconds": clock.first_run_at - clock.session_at,
      "step_seconds": statistics.median(timed), "steps_timed": len(timed),
      "save_seconds": trained - clock.last_end,
      "peak_train": peak()}
  if rank == 0:
    saved = tf.train.latest_checkpoint(args.model_dir)  # asynchronous
    # workers may step past max_steps together
    figures["checkpoint_bytes"] = checkpoint_bytes(
        args.model_dir, int(saved.rsplit("-", 1)[1]))
  if args.export:
    features, labels = data(args.rows, args.batch * args.eval_batches,
                            args.seed + 1)
    reset_peak()
    began = time.monotonic()
    estimator.evaluate(es.inputs.from_arrays(features, labels, args.batch,
                                             training=False))
    figures["eval_seconds"] = time.monotonic() - began
    figures["peak_eval"] = peak()
    reset_peak()
    began = time.monotonic()
    export_root = os.path.join(args.model_dir, "export")
    path = estimator.export_saved_model(export_root)
    figures["export_seconds"] = time.monotonic() - began
    figures["peak_export"] = peak()
    if rank == 0 and path:
      figures["export_bytes"] = folder_bytes(
          path.decode() if isinstance(path, bytes) else path)
  os.makedirs(args.out_dir, exist_ok=True)
  with open(os.path.join(args.out_dir, f"rank{rank}.json"), "w",
            encoding="utf-8") as f:
    json.dump(figures, f)


if __name__ == "__main__":
  main()

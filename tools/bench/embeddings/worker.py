"""One job of the embeddings bench: each table configuration trained in turn.

measure.py starts this as one process (`single`), as Horovod ranks
(`replicated`, `sharded`) or as a parameter-server cluster's tasks (`ps`),
once per job: each configuration of `--configs` gets a fresh Estimator and
graph in the same processes, so one start (ssh, imports, Horovod's
rendezvous) serves them all. Its updates run as three windows
(tools/bench/perf/timing.py): one update, the `--steps` measured ones, one
more; the pauses between them are where the bench reads the hosts' byte
counters, so a reading spans exactly the measured updates of every trainer.

Every batch looks up `--ids` ids, all distinct within the batch (drawn
without replacement, IDS_PER_EXAMPLE per example), so the rows a trainer
sends are exactly its ids and prediction.py needs no guess at duplicates.
Each configuration's variables sit in a scope of their own: a parameter
server keeps the variables of the configurations before it.

Each trainer writes `<--out>.<worker index>.json`; a ps task never returns
from training (the launcher stops it).
"""
import argparse
import json
import os
import socket

from tools.bench.embeddings import prediction
from tools.bench.perf import worker as perf_worker

MODULE = "tools.bench.embeddings.worker"
DISTRIBUTIONS = {"single": "none", "replicated": "horovod",
                 "sharded": "horovod", "ps": "parameter_server"}
# Distinct batches per trainer, cycled: enough that no row stays hot.
BATCHES = 16
UNREACHED_STEP = 10 ** 9


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--mode", choices=tuple(DISTRIBUTIONS), required=True)
  parser.add_argument("--configs", required=True,
                      help="ROWSxIDS,...: table rows and ids per batch")
  parser.add_argument("--dimension", type=int, default=32)
  parser.add_argument("--warmup", type=int, default=5)
  parser.add_argument("--steps", type=int, default=40,
                      help="measured updates per configuration")
  parser.add_argument("--pause_dir", required=True,
                      help="the handshake's folder; one sub-folder per "
                           "configuration, named by its index")
  parser.add_argument("--model_dir", required=True)
  parser.add_argument("--out", required=True)
  args = parser.parse_args(argv)
  args.configs = [tuple(int(v) for v in c.split("x"))
                  for c in args.configs.split(",")]
  return args


def _model(scope, rows, dimension, sharded):
  """The bench model: one table, the mean of an example's rows, a head."""
  # Not at the top: parse_args runs without TensorFlow.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import estimator_scale as es  # pylint: disable=g-import-not-at-top

  class OneTable(es.ClassifierModel):
    """Mean of an example's rows, a hidden layer, the logits."""

    name = None

    def logits(self, features, training, params):
      with tf.compat.v1.variable_scope(scope):
        if sharded:
          vectors = es.sharded_embedding(features["ids"], rows, dimension,
                                         name="table")
        else:
          vectors = tf.keras.layers.Embedding(rows, dimension, name="table")(
              features["ids"])
        hidden = tf.keras.layers.Dense(prediction.HIDDEN, tf.nn.relu,
                                       name="hidden")(tf.reduce_mean(vectors, 1))
        return tf.keras.layers.Dense(prediction.CLASSES, name="out")(hidden)

    def serving_features(self):
      return {"ids": tf.TensorSpec([prediction.IDS_PER_EXAMPLE], tf.int64)}

  return OneTable()


def batches(rows, ids, seed):
  """(ids [BATCHES, examples, IDS_PER_EXAMPLE], labels [BATCHES,
  examples]): each batch's ids distinct."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  examples = ids // prediction.IDS_PER_EXAMPLE
  picked = np.stack([rng.choice(rows, ids, replace=False)
                     for _ in range(BATCHES)])
  return (picked.reshape(BATCHES, examples, prediction.IDS_PER_EXAMPLE),
          rng.integers(0, prediction.CLASSES, (BATCHES, examples)))


def train(args, index, rows, ids):
  """Trains configuration `index`; returns this trainer's figures."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import estimator_scale as es  # pylint: disable=g-import-not-at-top
  from tools.bench.perf import timing  # pylint: disable=g-import-not-at-top
  # Horovod's allgather of the rows touched, pinned: "auto" would turn to
  # a dense allreduce of the table once the ranks touch more than it holds.
  exchange = "sparse" if args.mode == "replicated" else "auto"
  estimator = es.make_estimator(
      _model(f"config{index}", rows, args.dimension,
             args.mode == "sharded"),
      model_dir=os.path.join(args.model_dir, str(index)),
      distribution=DISTRIBUTIONS[args.mode],
      training_config=es.TrainingConfig(
          optimizer="adagrad", learning_rate=0.05,
          sparse_exchange=exchange),
      random_seed=0, save_checkpoints_steps=10 ** 9)
  topology = estimator.topology
  table_ids, labels = batches(rows, ids, seed=1000 * index +
                              topology.worker_index)

  def input_fn():
    return tf.data.Dataset.from_tensor_slices(
        ({"ids": table_ids}, labels)).repeat()

  hook = timing.TimingHook(args.warmup, [1, args.steps, 1], rewarm=0,
                           pause_dir=os.path.join(args.pause_dir, str(index)))
  runs = args.warmup + args.steps + 2
  # Asynchronous ps workers share global_step, so a step count would stop
  # one worker early: there only the hook counts a worker's own updates.
  if args.mode == "ps":
    estimator.train(input_fn, hooks=[hook], max_steps=UNREACHED_STEP)
  else:
    estimator.train(input_fn, hooks=[hook], steps=runs)
  if len(hook.windows) < 3:
    raise RuntimeError(f"configuration {rows}x{ids} stopped after "
                       f"{hook.runs} runs, before {runs}")
  updates, seconds = hook.windows[1]
  return topology.worker_index, {
      "rows": rows, "ids": ids, "updates": updates, "seconds": seconds,
      "examples": updates * ids // prediction.IDS_PER_EXAMPLE}


def main(argv=None):
  args = parse_args(argv)
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  perf_worker.pin_threads(1)
  figures, index = [], 0
  for config, (rows, ids) in enumerate(args.configs):
    index, result = train(args, config, rows, ids)
    figures.append(result)
  with open(f"{args.out}.{index}.json", "w", encoding="utf-8") as f:
    json.dump({"host": socket.gethostname(), "configs": figures}, f)


if __name__ == "__main__":
  main()

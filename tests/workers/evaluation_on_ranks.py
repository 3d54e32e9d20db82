"""Trains a click model whose tables are split over Horovod ranks, then
evaluates it and predicts: on the ranks, or (--distribution=none) on one
process from the same checkpoint.

Two tables, one `es.sharded_embedding` (hashed ids) and one
`es.dynamic_embedding` (raw ids), so both kinds are read on the ranks in
one graph. Every process writes the metrics it got to
`<out_dir>/<name>-rank<r>.json`, where `name` is --name, and its scores of
the first `predicted(r)` evaluation examples to `<name>-rank<r>.npy` (on
the ranks, each its own number of them); with --export_dir
the chief exports the model after (and with --compact_export_dir, with
the dynamic table's rows as int8). The batches each process evaluated and
predicted go to `<name>-rank<r>-batches.json` (--rank0_stops_after: rank
0's hook asks to stop).
"""
import json
import os

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

import estimator_scale as es

FLAGS = flags.FLAGS

TRAIN_EXAMPLES = 256
EVAL_EXAMPLES = 150  # batches of 32: four full ones and one of 22


def _define_flags():
  """Defined when run as a script only (tests import this module)."""
  flags.DEFINE_string("model_dir", None, "the model's checkpoints")
  flags.DEFINE_string("out_dir", None, "where each process writes metrics")
  flags.DEFINE_string("name", "eval", "the metrics files' name")
  flags.DEFINE_string("distribution", "horovod", "horovod or none")
  flags.DEFINE_integer("steps", 30, "updates to train (0: evaluate only)")
  flags.DEFINE_integer("save_checkpoints_steps", None,
                       "updates between saves (default: --steps)")
  flags.DEFINE_integer("full_checkpoint_every", 1,
                       "saves per full save of the tables; deltas between")
  flags.DEFINE_integer("eval_steps", None, "batches to evaluate")
  flags.DEFINE_integer("eval_batch_size", 32, "")
  flags.DEFINE_integer("global_batch_size", 32, "training's")
  flags.DEFINE_integer("vocabulary", 64, "the sharded table's rows")
  flags.DEFINE_integer("capacity", 96, "the dynamic table's rows")
  flags.DEFINE_integer("dimension", 4, "both tables' vectors")
  flags.DEFINE_string("export_dir", None, "where the model is exported")
  flags.DEFINE_string("compact_export_dir", None,
                      "where the model is exported with its dynamic table's "
                      "rows as int8")
  flags.DEFINE_integer("rank0_stops_after", None,
                       "batches after which a hook of rank 0 alone asks "
                       "evaluation and prediction to stop")


def click_data(examples, seed, vocabulary):
  """(features, labels): a hashed id and a raw id per example; the click
  rate rises with the hashed id, so the model learns an AUC above 0.5."""
  rng = np.random.RandomState(seed)
  hashed = rng.randint(0, vocabulary, size=(examples, 1)).astype(np.int64)
  raw = rng.choice(rng.randint(1, 1 << 60, size=40, dtype=np.int64),
                   size=(examples, 1))
  clicks = rng.rand(examples) < (0.05 + 0.9 * hashed[:, 0] / vocabulary)
  return {"hashed": hashed, "raw": raw}, clicks.astype(np.int64)


def predicted(rank):
  """How many of the evaluation examples rank `rank` predicts on the ranks:
  a different number each, so that the ranks run out of batches apart
(rank 3 has none at all)."""
  return max(0, EVAL_EXAMPLES - 50 * rank)


class _Shapes(tf.compat.v1.train.SessionRunHook):
  """The shapes of the predicting graph's variables."""

  def begin(self):
    self.shapes = {v.op.name: v.shape.as_list()
                   for v in tf.compat.v1.global_variables()}


class _Batches(tf.compat.v1.train.SessionRunHook):
  """Counts the batches run; asks to stop after `stop_after` of them."""

  def __init__(self, stop_after=None):
    self.stop_after = stop_after
    self.count = 0

  def after_run(self, run_context, run_values):
    self.count += 1
    if self.count == self.stop_after:
      run_context.request_stop()


def _hooks(rank):
  """A counting hook, and on rank 0 with --rank0_stops_after one that stops."""
  counted = _Batches()
  if rank == 0 and FLAGS.rank0_stops_after:
    return counted, [counted, _Batches(FLAGS.rank0_stops_after)]
  return counted, [counted]


class Clicks(es.BinaryClassifierModel):
  """The sum of a sharded and a dynamic table's vectors, then a logit."""

  name = None

  def logits(self, features, training, params):
    dimension = FLAGS.dimension
    hashed = es.sharded_embedding(features["hashed"], FLAGS.vocabulary,
                                  dimension, name="hashed_table")
    raw = es.dynamic_embedding(features["raw"], dimension,
                               capacity=FLAGS.capacity, name="raw_table")
    net = tf.reshape(hashed + raw, [-1, dimension])
    return tf.keras.layers.Dense(1, name="logit")(net)

  def serving_features(self):
    return {"hashed": tf.TensorSpec([1], tf.int64),
            "raw": tf.TensorSpec([1], tf.int64)}


def main(argv):
  del argv
  estimator = es.make_estimator(
      Clicks(), model_dir=FLAGS.model_dir, distribution=FLAGS.distribution,
      training_config=es.TrainingConfig(
          optimizer="adagrad", learning_rate=0.5),
      random_seed=0, full_checkpoint_every=FLAGS.full_checkpoint_every,
      save_checkpoints_steps=FLAGS.save_checkpoints_steps or max(
          1, FLAGS.steps))
  if FLAGS.steps:
    features, labels = click_data(TRAIN_EXAMPLES, 1, FLAGS.vocabulary)
    estimator.train(es.inputs.from_arrays(features, labels,
                                          FLAGS.global_batch_size),
                    max_steps=FLAGS.steps)
  features, labels = click_data(EVAL_EXAMPLES, 2, FLAGS.vocabulary)
  rank = estimator.topology.worker_index
  evaluated, hooks = _hooks(rank)
  metrics = estimator.evaluate(
      es.inputs.from_arrays(features, labels, FLAGS.eval_batch_size,
                            training=False), steps=FLAGS.eval_steps,
      hooks=hooks)
  os.makedirs(FLAGS.out_dir, exist_ok=True)
  path = os.path.join(FLAGS.out_dir, f"{FLAGS.name}-rank{rank}.json")
  with open(path, "w") as f:
    json.dump({k: float(v) for k, v in metrics.items()}, f)
  on_ranks = FLAGS.distribution == "horovod"
  count = predicted(rank if on_ranks else 0)
  shapes = _Shapes()
  predicted_batches, hooks = _hooks(rank)
  # A plain input_fn: from_arrays refuses an empty input, rank 3's.
  scores = [p["logistic"] for p in estimator.predict(
      lambda: tf.data.Dataset.from_tensor_slices(
          ({k: v[:count] for k, v in features.items()}, labels[:count])
      ).batch(FLAGS.eval_batch_size), hooks=[shapes] + hooks,
      on_ranks=on_ranks)]
  np.save(path.replace(".json", ".npy"),
          np.array(scores, np.float32).reshape(-1))
  with open(path.replace(".json", "-shapes.json"), "w") as f:
    json.dump(shapes.shapes, f)
  with open(path.replace(".json", "-batches.json"), "w") as f:
    json.dump({"evaluate": evaluated.count,
               "predict": predicted_batches.count}, f)
  if FLAGS.export_dir:
    estimator.export_saved_model(FLAGS.export_dir)
  if FLAGS.compact_export_dir:
    estimator.export_saved_model(FLAGS.compact_export_dir,
                                 compact=es.CompactExport(dtype="int8"))


if __name__ == "__main__":
  _define_flags()
  app.run(main)

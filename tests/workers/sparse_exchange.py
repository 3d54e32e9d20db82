"""A worker that counts the embedding rows Horovod ranks send each other.

Trains an embedding over ids that repeat many times in every batch, with
accumulation, and records per update how many rows each allgather carried
(the length of every HorovodAllgather's output: rows from all ranks) and the
example ids this rank read, then writes `<out_dir>/<run>/rank<r>.json` and
its variables to `<out_dir>/<run>/rank<r>.npz` for each of `--runs`, trained
in turn in one process (one job start for every table and exchange).
"""
import json
import os

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

import estimator_scale as es

FLAGS = flags.FLAGS


def _define_flags():
  """Defined when run as a script only: tests import this module, and their
  process holds other modules' flags of the same names."""
  flags.DEFINE_string("distribution", "none", "backend")
  flags.DEFINE_string("model_dir", None, "")
  flags.DEFINE_string("out_dir", None, "")
  flags.DEFINE_list("runs", None,
                    "NAME:TABLE_ROWS:SPARSE_EXCHANGE of each model to train")
  flags.DEFINE_integer("steps", 8, "updates")
  flags.DEFINE_integer("accumulation_steps", 4, "")
  flags.DEFINE_integer("global_batch_size", 64, "")


EXAMPLES = 256
LOOKUPS = 16
COMMON_IDS = 5  # every example looks up all of 0..4, several times
RARE_ID = 6  # looked up by examples 0, 100 and 200 only


def token_data():
  """(features, labels): LOOKUPS ids per example, mostly repeats of 0..4."""
  rng = np.random.RandomState(0)
  tokens = rng.randint(0, COMMON_IDS, (EXAMPLES, LOOKUPS))
  tokens[:, :COMMON_IDS] = np.arange(COMMON_IDS)
  tokens[::100, -1] = RARE_ID
  labels = rng.randint(0, 3, EXAMPLES)
  return ({"tokens": tokens.astype(np.int64), "id": np.arange(EXAMPLES)},
          labels.astype(np.int64))


class RepeatedIds(es.ClassifierModel):
  """Mean of the looked-up rows, then a linear layer."""

  name = None

  def __init__(self, table_rows):
    self.table_rows = table_rows

  def logits(self, features, training, params):
    table = tf.compat.v1.get_variable(
        "table", [self.table_rows, 8],
        initializer=tf.compat.v1.random_normal_initializer(seed=2))
    net = tf.reduce_mean(tf.nn.embedding_lookup(table, features["tokens"]), 1)
    return tf.compat.v1.layers.dense(
        net, 3, name="out",
        kernel_initializer=tf.compat.v1.glorot_uniform_initializer(seed=1))

  def training_hooks(self, features, labels):
    tf.compat.v1.add_to_collection("example_ids", features["id"])
    return []

  def serving_features(self):
    return {"tokens": tf.TensorSpec([LOOKUPS], tf.int64)}


class CountHook(tf.compat.v1.train.SessionRunHook):
  """Per update: the rows each allgather of indices carried, the ids read."""

  def __init__(self):
    self.rows = []
    self.ids = []

  def begin(self):
    graph = tf.compat.v1.get_default_graph()
    gathers = [op for op in graph.get_operations()
               if op.type == "HorovodAllgather" and
               op.inputs[0].dtype.is_integer]
    self._rows = [tf.shape(op.outputs[0])[0] for op in gathers]
    self._ids = tf.compat.v1.get_collection("example_ids")
    self._variables = {v.op.name: v for v in tf.compat.v1.global_variables()
                       if v.op.name.startswith("model/") and
                       "Momentum" not in v.op.name}

  def before_run(self, run_context):
    return tf.compat.v1.train.SessionRunArgs((self._rows, self._ids))

  def after_run(self, run_context, run_values):
    rows, ids = run_values.results
    self.rows.append([int(r) for r in rows])
    self.ids.append(np.concatenate(ids).tolist())

  def end(self, session):
    self.values = session.run(self._variables)


def main(argv):
  del argv
  for run in FLAGS.runs:
    name, table_rows, sparse_exchange = run.split(":")
    _train(os.path.join(FLAGS.out_dir, name),
           os.path.join(FLAGS.model_dir, name), int(table_rows),
           sparse_exchange)


def _train(out_dir, model_dir, table_rows, sparse_exchange):
  features, labels = token_data()
  config = es.TrainingConfig(
      optimizer="momentum", learning_rate=0.1,
      accumulation_steps=FLAGS.accumulation_steps,
      sparse_exchange=sparse_exchange)
  estimator = es.make_estimator(
      RepeatedIds(table_rows), model_dir=model_dir,
      distribution=FLAGS.distribution, training_config=config, random_seed=0)
  topology = estimator.topology
  hook = CountHook()
  estimator.train(es.inputs.from_arrays(
      features, labels, FLAGS.global_batch_size, topology=topology,
      accumulation_steps=FLAGS.accumulation_steps, seed=None),
                  hooks=[hook], max_steps=FLAGS.steps)
  os.makedirs(out_dir, exist_ok=True)
  name = os.path.join(out_dir, f"rank{topology.worker_index}")
  np.savez(name + ".npz", **hook.values)
  with open(name + ".json", "w", encoding="utf-8") as f:
    json.dump({"rows": hook.rows, "ids": hook.ids}, f)


if __name__ == "__main__":
  _define_flags()
  app.run(main)

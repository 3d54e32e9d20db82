"""A Horovod rank training a sharded table with Adam, reporting its peak RSS.

Trains `--steps` updates of a model whose only large variable is a table
of `--rows` x `--dimension` made by `es.sharded_embedding`, then writes
`<out_dir>/rank<r>.json`: this rank's peak resident memory (VmHWM) before
the first update, after the last and after training ended (the shards' checkpoint written), and
the bytes of its shard, and its host. Run once with the table and once with `--rows` tiny
to get a rank's memory without it.
"""
import json
import os
import socket

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

import estimator_scale as es

FLAGS = flags.FLAGS

IDS_PER_EXAMPLE = 8


def _define_flags():
  """Defined when run as a script only."""
  flags.DEFINE_string("out_dir", None, "where each rank's figures go")
  flags.DEFINE_string("model_dir", None, "the shared model_dir")
  flags.DEFINE_integer("rows", 1 << 22, "the table's rows")
  flags.DEFINE_integer("dimension", 32, "the table's vector length")
  flags.DEFINE_integer("steps", 4, "updates")
  flags.DEFINE_integer("global_batch_size", 512, "")


def peak_rss_bytes(field="VmHWM"):
  """This process's peak resident set size (or `field` of
  /proc/self/status), in bytes."""
  with open("/proc/self/status", encoding="ascii") as status:
    for line in status:
      if line.startswith(field + ":"):
        return int(line.split()[1]) * 1024
  raise RuntimeError(f"no {field} in /proc/self/status")


class Clicks(es.ClassifierModel):
  """Mean of the looked-up rows, then a linear layer."""

  name = None

  def logits(self, features, training, params):
    vectors = es.sharded_embedding(features["ids"], FLAGS.rows,
                                   FLAGS.dimension, name="ids")
    return tf.compat.v1.layers.dense(tf.reduce_mean(vectors, 1), 2,
                                     name="out")

  def serving_features(self):
    return {"ids": tf.TensorSpec([IDS_PER_EXAMPLE], tf.int64)}


class _Peaks(tf.compat.v1.train.SessionRunHook):
  """Reads the peak RSS before the first update (the variables made and
  initialised) and after the last one, before the final save."""

  def __init__(self):
    self.at_start = None
    self.after_updates = None

  def before_run(self, run_context):
    if self.at_start is None:
      self.at_start = peak_rss_bytes()
      self.rss_at_start = peak_rss_bytes("VmRSS")

  def after_run(self, run_context, run_values):
    self.after_updates = peak_rss_bytes()
    self.rss_after_updates = peak_rss_bytes("VmRSS")


def main(argv):
  del argv
  estimator = es.make_estimator(
      Clicks(), model_dir=FLAGS.model_dir, distribution="horovod",
      training_config=es.TrainingConfig(
          optimizer="adam", learning_rate=0.01),
      random_seed=0, save_checkpoints_steps=1000)
  topology = estimator.topology
  rng = np.random.RandomState(topology.worker_index)
  examples = 4 * FLAGS.global_batch_size
  features = {"ids": rng.randint(0, FLAGS.rows, (examples, IDS_PER_EXAMPLE),
                                 dtype=np.int64)}
  labels = rng.randint(0, 2, examples).astype(np.int64)
  hook = _Peaks()
  estimator.train(es.inputs.from_arrays(
      features, labels, FLAGS.global_batch_size, topology=topology),
      hooks=[hook], max_steps=FLAGS.steps)
  rows = -(-FLAGS.rows // topology.num_workers)
  os.makedirs(FLAGS.out_dir, exist_ok=True)
  with open(os.path.join(FLAGS.out_dir, f"rank{topology.worker_index}.json"),
            "w", encoding="utf-8") as f:
    json.dump({"at_start": hook.at_start, "after_updates": hook.after_updates,
               "after_training": peak_rss_bytes(),
               "rss_at_start": hook.rss_at_start,
               "rss_after_updates": hook.rss_after_updates,
               "shard_bytes": rows * FLAGS.dimension * 4,
               "host": socket.gethostname()}, f)


if __name__ == "__main__":
  _define_flags()
  app.run(main)

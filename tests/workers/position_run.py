"""A worker for the input-position tests: trains to a step, writes the ids it trained on.

Each worker writes `<out_dir>/ids-<run>-<worker index>.json`, the example
ids of every batch it trained on in this run, so a test can count, over
every worker and every restart, how often each example was trained.
"""
import json
import os

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

import estimator_scale as es
from tests.workers.tiny_models import generated_data

flags.DEFINE_string("distribution", "none", "backend")
flags.DEFINE_string("model_dir", None, "the job's checkpoints")
flags.DEFINE_string("out_dir", None, "where the ids go")
flags.DEFINE_string("run", "0", "this run's name in the file names")
flags.DEFINE_integer("examples", 96, "examples with ids 0 ... examples - 1")
flags.DEFINE_integer("global_batch_size", 8, "examples per update")
flags.DEFINE_integer("max_steps", 12, "the update this run stops at")
FLAGS = flags.FLAGS


class IdsHook(tf.compat.v1.train.SessionRunHook):
  """Collects the ids of every batch trained on (every replica's)."""

  def __init__(self):
    self.seen = []

  def begin(self):
    self._ids = tf.compat.v1.get_collection("example_ids")

  def before_run(self, run_context):
    return tf.compat.v1.train.SessionRunArgs(self._ids)

  def after_run(self, run_context, run_values):
    for batch in run_values.results:
      self.seen.extend(np.asarray(batch).reshape(-1).tolist())


def main(argv):
  del argv
  model, features, labels = generated_data("mlp", FLAGS.examples)
  estimator = es.make_estimator(
      model, model_dir=FLAGS.model_dir, distribution=FLAGS.distribution,
      save_checkpoints_steps=1000, random_seed=0)
  topology = estimator.topology
  hook = IdsHook()
  estimator.train(es.inputs.from_arrays(features, labels,
                                        FLAGS.global_batch_size,
                                        topology=topology, seed=11),
                  hooks=[hook], max_steps=FLAGS.max_steps)
  os.makedirs(FLAGS.out_dir, exist_ok=True)
  path = os.path.join(FLAGS.out_dir,
                      f"ids-{FLAGS.run}-{topology.worker_index}.json")
  with open(path, "w") as f:
    json.dump(hook.seen, f)


if __name__ == "__main__":
  app.run(main)

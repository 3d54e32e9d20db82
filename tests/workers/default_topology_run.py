"""A worker whose inputs are built without `topology=`: they take the
Estimator's.

One Estimator trains an epoch of `es.inputs.from_arrays`, then the next
epoch of `es.inputs.from_tfrecords` (the test's files, sharded by file),
neither given a topology or accumulation steps. Each process appends the
ids it trained on, update by update, to `<out_dir>/ids-<input>-<pid>.jsonl`
(`trained_ids.IdsHook`), so the test can check that each epoch trained
every example exactly once over all workers.
"""
import os

from absl import app
from absl import flags
import tensorflow as tf

import estimator_scale as es
from tests.helpers import trained_ids
from tests.workers.tiny_models import generated_data

flags.DEFINE_string("distribution", "none", "backend")
flags.DEFINE_string("model_dir", None, "the job's checkpoints")
flags.DEFINE_string("out_dir", None, "where the ids go")
flags.DEFINE_string("tfrecords", None, "glob of the TFRecord files of the "
                    "same examples (`generated_data('mlp', --examples)`)")
flags.DEFINE_integer("examples", 96, "examples with ids 0 ... examples - 1")
flags.DEFINE_integer("global_batch_size", 8, "examples per update")
flags.DEFINE_integer("accumulation_steps", 2, "micro-batches per update")
FLAGS = flags.FLAGS

SPEC = {"x": tf.io.FixedLenFeature([5], tf.float32),
        "id": tf.io.FixedLenFeature([], tf.int64),
        "label": tf.io.FixedLenFeature([], tf.int64)}
"""What `es.inputs.write_tfrecord_shards` writes of generated_data('mlp')."""


def main(argv):
  del argv
  model, features, labels = generated_data("mlp", FLAGS.examples)
  estimator = es.make_estimator(
      model, model_dir=FLAGS.model_dir, distribution=FLAGS.distribution,
      training_config=es.TrainingConfig(
          accumulation_steps=FLAGS.accumulation_steps),
      save_checkpoints_steps=1000, random_seed=0)
  topology = estimator.topology
  os.makedirs(FLAGS.out_dir, exist_ok=True)
  inputs = [
      ("arrays", es.inputs.from_arrays(features, labels,
                                       FLAGS.global_batch_size, seed=11)),
      ("tfrecords", es.inputs.from_tfrecords(
          FLAGS.tfrecords, SPEC, "label", FLAGS.global_batch_size, seed=11,
          shuffle_buffer=5)),
  ]
  epoch_steps = FLAGS.examples // FLAGS.global_batch_size
  for epoch, (name, input_fn) in enumerate(inputs, start=1):
    assert input_fn.topology is None
    hook = trained_ids.IdsHook(
        os.path.join(FLAGS.out_dir, f"ids-{name}-{os.getpid()}.jsonl"),
        worker=topology.worker_index, size=topology.num_workers)
    estimator.train(input_fn, hooks=[hook], max_steps=epoch * epoch_steps)


if __name__ == "__main__":
  app.run(main)

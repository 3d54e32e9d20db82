"""A worker for the input-position tests: trains to a step, records the ids it trained on.

Each process appends to `<out_dir>/ids-<run>-<pid>.jsonl`, update by
update, the example ids it trained on with its worker index, the job's size
and the step (`trained_ids.IdsHook`), so a test can count, over every
worker and every restart, how often each example was trained, even when a
worker was killed. With --elastic it is a rank of an elastic Horovod job
(under horovodrun's elastic driver), trained again after each change; with
--stop_at_file, a job whose command cannot change between restarts (the
launcher's) stops at a step chosen while it runs.
"""
import os
import shutil
import sys
import time

from absl import app
from absl import flags
import tensorflow as tf

import estimator_scale as es
from estimator_scale.backends import coordinator
from tests.helpers import trained_ids
from tests.workers.tiny_models import generated_data
from tools.rig.chaos import moments as chaos_moments

CASE_TRAINING = {"mlp": {}, "click": {
    "optimizer": "adagrad", "learning_rate": 0.05}}
"""TrainingConfig's arguments for each --case: the tables' rows want an
optimizer with a rate of their own."""

flags.DEFINE_string("distribution", "none", "backend")
flags.DEFINE_string("model_dir", None, "the job's checkpoints")
flags.DEFINE_string("out_dir", None, "where the ids go")
flags.DEFINE_string("run", "0", "this run's name in the file names")
flags.DEFINE_enum("case", "mlp", list(CASE_TRAINING), "the network and its "
                  "data (tiny_models): the MLP on random labels, or the "
                  "click model with sharded tables on generated clicks")
flags.DEFINE_integer("examples", 96, "examples with ids 0 ... examples - 1")
flags.DEFINE_integer("global_batch_size", 8, "examples per update")
flags.DEFINE_integer("accumulation_steps", 1, "micro-batches per update")
flags.DEFINE_integer("max_steps", 12, "the update this run stops at")
flags.DEFINE_integer("save_checkpoints_steps", 1000, "updates between "
                     "checkpoints (not elastic: its checkpoints are commits)")
flags.DEFINE_string("tfrecords", None, "read the examples from 12 TFRecord "
                    "files in this directory (written by the first worker "
                    "that finds it missing), sharded by file, instead of "
                    "from arrays")
flags.DEFINE_bool("elastic", False, "a rank of an elastic Horovod job")
flags.DEFINE_integer("commit_every_n_steps", 10, "elastic: updates between "
                     "commits")
flags.DEFINE_enum("elastic_batch", "scale", ["scale", "hold"], "elastic: "
                  "the global batch follows the ranks, or stays (the "
                  "micro-batches shared over the ranks)")
flags.DEFINE_bool("ps_sync", False, "parameter_server: synchronous updates")
flags.DEFINE_string("stop_at_file", None, "stop once global_step reaches the "
                    "step this file names (read after every update): a "
                    "driver ends a job of many restarts, whose command is "
                    "fixed, at a step it picks late")
flags.DEFINE_string("moments_dir", None, "where a chaos driver arms the "
                    "moments it aims faults at (estimator_scale.moments)")
flags.DEFINE_float("seconds_per_update", 0.0, "a pause after each update, so "
                   "that a test can change the hosts between updates")
FLAGS = flags.FLAGS


class _Pause(tf.compat.v1.train.SessionRunHook):

  def after_run(self, run_context, run_values):
    time.sleep(FLAGS.seconds_per_update)


_SPEC = {"x": tf.io.FixedLenFeature([5], tf.float32),
         "id": tf.io.FixedLenFeature([], tf.int64),
         "label": tf.io.FixedLenFeature([], tf.int64)}


class _StopAtFile(tf.compat.v1.train.SessionRunHook):
  """Stops at the step --stop_at_file names, once it exists: written a few
  commits ahead, every task of a synchronous job reads the same step before
  reaching it, so all stop after the same update, as with max_steps."""

  def begin(self):
    self._global_step = tf.compat.v1.train.get_global_step()

  def after_run(self, run_context, run_values):
    try:
      with open(FLAGS.stop_at_file, encoding="utf-8") as f:
        target = int(f.read())
    except (FileNotFoundError, ValueError):  # not yet, or half written
      return
    if run_context.session.run(self._global_step) >= target:
      run_context.request_stop()


def _tfrecords(features, labels):
  """The glob of --tfrecords' 12 files, written once: each worker writes a
  directory of its own and renames it into place unless another was first."""
  if not os.path.isdir(FLAGS.tfrecords):
    mine = f"{FLAGS.tfrecords}.{os.getpid()}"
    es.inputs.write_tfrecord_shards(features, labels, mine, 12)
    try:
      os.rename(mine, FLAGS.tfrecords)
    except OSError:
      if not os.path.isdir(FLAGS.tfrecords):
        raise
      shutil.rmtree(mine)
  return os.path.join(FLAGS.tfrecords, "*.tfrecord")


def _train(batch=None):
  """Trains to --max_steps with `batch` (an elastic Batch) or the flags'."""
  model, features, labels = generated_data(FLAGS.case, FLAGS.examples)
  global_batch_size = (batch.global_batch_size if batch else
                       FLAGS.global_batch_size)
  config = es.TrainingConfig(
      accumulation_steps=(batch.accumulation_steps if batch else
                          FLAGS.accumulation_steps),
      **CASE_TRAINING[FLAGS.case])
  estimator = es.make_estimator(
      model, model_dir=FLAGS.model_dir, distribution=FLAGS.distribution,
      training_config=config,
      save_checkpoints_steps=FLAGS.save_checkpoints_steps, random_seed=0,
      **({"ps_sync": True} if FLAGS.ps_sync else {}))
  topology = estimator.topology
  os.makedirs(FLAGS.out_dir, exist_ok=True)
  hooks = [trained_ids.IdsHook(
      os.path.join(FLAGS.out_dir, f"ids-{FLAGS.run}-{os.getpid()}.jsonl"),
      worker=topology.worker_index, size=topology.num_workers)]
  if FLAGS.seconds_per_update:
    hooks.append(_Pause())
  if FLAGS.stop_at_file:
    hooks.append(_StopAtFile())
  if FLAGS.tfrecords:
    input_fn = es.inputs.from_tfrecords(
        _tfrecords(features, labels), _SPEC, "label", global_batch_size,
        topology=topology, accumulation_steps=config.accumulation_steps,
        seed=11, shuffle_buffer=5)
  else:
    input_fn = es.inputs.from_arrays(
        features, labels, global_batch_size, topology=topology,
        accumulation_steps=config.accumulation_steps, seed=11)
  estimator.train(input_fn, hooks=hooks, max_steps=FLAGS.max_steps)
  if estimator.stopped_by_signal:  # not finished: as the CLI ends it
    sys.exit(coordinator.EXIT_STOPPED_BY_SIGNAL)



def main(argv):
  del argv
  if FLAGS.moments_dir:
    os.environ.update(chaos_moments.environ(FLAGS.moments_dir))
  if FLAGS.tfrecords and FLAGS.case != "mlp":
    raise app.UsageError(f"--tfrecords writes the mlp case's examples; "
                         f"--case={FLAGS.case} reads arrays only")
  if FLAGS.elastic:
    es.run_elastic(_train, FLAGS.global_batch_size, FLAGS.accumulation_steps,
                   elastic_batch=FLAGS.elastic_batch,
                   commit_every_n_steps=FLAGS.commit_every_n_steps)
  else:
    _train()


if __name__ == "__main__":
  app.run(main)

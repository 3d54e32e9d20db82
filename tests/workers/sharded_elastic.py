"""A rank of an elastic Horovod job training a table sharded over the ranks.

The model is `sharded_equivalence.Tokens` with its table made by
`es.sharded_embedding`, or `es.dynamic_embedding` with --kind=dynamic
(Adagrad, so each row has a slot). Rank 0 grows the
discovery script's host file (`--hosts_file`) to `--grow_to` slots after
update `--grow_at_step`, and every update from there pauses while the job
is smaller than that, so that horovodrun's driver notices the new slot
before training ends; from --shrink_at_step rank 0 shrinks it back to
--shrink_to slots, and updates pause while the job is larger. Each rank
records the examples of each update (`trained_ids.IdsHook`, to
`<out_dir>/ids-elastic-<pid>.jsonl`) and writes its variables (its shard and slots
as it holds them, the dense layer) to
`<out_dir>/<event>-<step>-of<size>-rank<r>.npz` where a test compares them:
`start` before the session's first update (after any restore), `commit`
after each update that ends at a commit, `end` as training ends.
"""
import os
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

import estimator_scale as es
from tests.helpers import dumps
from tests.helpers import trained_ids
from tests.workers import sharded_equivalence

flags.DEFINE_string("model_dir", None, "the job's shared model_dir")
flags.DEFINE_string("out_dir", None, "where the variables go")
flags.DEFINE_integer("steps", 16, "the update training ends at")
flags.DEFINE_integer("commit_every_n_steps", 4, "updates between commits")
flags.DEFINE_integer("global_batch_size", 24, "at the starting size")
flags.DEFINE_integer("accumulation_steps", 2, "micro-batches per update")
flags.DEFINE_enum("kind", "sharded", ["sharded", "dynamic"], "the table")
flags.DEFINE_string("hosts_file", None, "what the discovery script prints")
flags.DEFINE_integer("grow_at_step", 1, "the update after which it grows")
flags.DEFINE_integer("grow_to", 3, "localhost slots it grows to")
flags.DEFINE_integer("shrink_at_step", 0, "the update from which it shrinks "
                     "to --shrink_to slots (0: never)")
flags.DEFINE_integer("shrink_to", 2, "localhost slots it shrinks to")
flags.DEFINE_integer("full_checkpoint_every", 1, "saves per full one, the "
                     "others deltas")
flags.DEFINE_float("seconds_per_update", 0.3, "the pause of each update "
                   "while the job has fewer than --grow_to ranks")
FLAGS = flags.FLAGS


class DumpHook(dumps.DumpHook):
  """Also writes this rank's variables after each update that ends at a
  commit; grows the host file at --grow_at_step and shrinks it from
  --shrink_at_step (rank 0)."""

  def after_run(self, run_context, run_values):
    step = run_context.session.run(self._step)
    if step % FLAGS.commit_every_n_steps == 0:
      self.dump(run_context.session, "commit")
    shrinking = FLAGS.shrink_at_step and step >= FLAGS.shrink_at_step
    if self._rank == 0 and step == FLAGS.grow_at_step and not shrinking:
      self._hosts(FLAGS.grow_to)
    if self._rank == 0 and shrinking and self._size > FLAGS.shrink_to:
      self._hosts(FLAGS.shrink_to)
    if ((self._size < FLAGS.grow_to and step >= FLAGS.grow_at_step
         and not shrinking) or (shrinking and self._size > FLAGS.shrink_to)):
      time.sleep(FLAGS.seconds_per_update)

  def _hosts(self, slots):
    with open(FLAGS.hosts_file, "w") as f:
      f.write(f"localhost:{slots}\n")


class Recorded(sharded_equivalence.Tokens):
  """Tokens that record the examples each update trains on."""

  def training_hooks(self, features, labels):
    tf.compat.v1.add_to_collection("example_ids", features["example"])
    return []


def train(batch):
  config = es.TrainingConfig(
      optimizer="adagrad", learning_rate=0.5,
      accumulation_steps=batch.accumulation_steps)
  estimator = es.make_estimator(
      Recorded(FLAGS.kind), model_dir=FLAGS.model_dir,
      distribution="horovod", training_config=config, random_seed=0,
      full_checkpoint_every=FLAGS.full_checkpoint_every)
  features, labels = sharded_equivalence.token_data()
  features["example"] = np.arange(len(labels), dtype=np.int64)
  topology = estimator.topology
  ids = trained_ids.IdsHook(
      os.path.join(FLAGS.out_dir, f"ids-elastic-{os.getpid()}.jsonl"),
      worker=topology.worker_index, size=topology.num_workers)
  estimator.train(es.inputs.from_arrays(
      features, labels, batch.global_batch_size, topology=topology,
      accumulation_steps=batch.accumulation_steps, seed=5),
                  hooks=[DumpHook(topology, FLAGS.out_dir), ids],
                  max_steps=FLAGS.steps)


def main(argv):
  del argv
  os.makedirs(FLAGS.out_dir, exist_ok=True)
  es.run_elastic(train, FLAGS.global_batch_size, FLAGS.accumulation_steps,
                 commit_every_n_steps=FLAGS.commit_every_n_steps)


if __name__ == "__main__":
  app.run(main)

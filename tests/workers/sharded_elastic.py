"""A rank of an elastic Horovod job training a table sharded over the ranks.

The model is `sharded_equivalence.Tokens` with its table made by
`es.sharded_embedding`, or `es.dynamic_embedding` with --kind=dynamic
(Adagrad, so each row has a slot). Rank 0 grows the
discovery script's host file (`--hosts_file`) to `--grow_to` slots after
update `--grow_at_step`, and every update from there pauses while the job
is smaller than that, so that horovodrun's driver notices the new slot
before training ends. Each rank writes its variables (its shard and slots
as it holds them, the dense layer) to
`<out_dir>/<event>-<step>-of<size>-rank<r>.npz` where a test compares them:
`start` before the session's first update (after any restore), `commit`
after each update that ends at a commit, `end` as training ends.
"""
import os
import time

from absl import app
from absl import flags

import estimator_scale as es
from tests.helpers import dumps
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
flags.DEFINE_float("seconds_per_update", 0.3, "the pause of each update "
                   "while the job has fewer than --grow_to ranks")
FLAGS = flags.FLAGS


class DumpHook(dumps.DumpHook):
  """Also writes this rank's variables after each update that ends at a
  commit; grows the host file at --grow_at_step (rank 0)."""

  def after_run(self, run_context, run_values):
    step = run_context.session.run(self._step)
    if step % FLAGS.commit_every_n_steps == 0:
      self.dump(run_context.session, "commit")
    if self._rank == 0 and step == FLAGS.grow_at_step:
      with open(FLAGS.hosts_file, "w") as f:
        f.write(f"localhost:{FLAGS.grow_to}\n")
    if self._size < FLAGS.grow_to and step >= FLAGS.grow_at_step:
      time.sleep(FLAGS.seconds_per_update)


def train(batch):
  config = es.TrainingConfig(
      optimizer="adagrad", schedule=es.Schedule(learning_rate=0.5),
      accumulation_steps=batch.accumulation_steps)
  estimator = es.make_estimator(
      sharded_equivalence.Tokens(FLAGS.kind), model_dir=FLAGS.model_dir,
      distribution="horovod", training_config=config, random_seed=0)
  features, labels = sharded_equivalence.token_data()
  estimator.train(es.inputs.from_arrays(
      features, labels, batch.global_batch_size, topology=estimator.topology,
      accumulation_steps=batch.accumulation_steps, seed=5),
                  hooks=[DumpHook(estimator.topology, FLAGS.out_dir)],
                  max_steps=FLAGS.steps)


def main(argv):
  del argv
  os.makedirs(FLAGS.out_dir, exist_ok=True)
  es.run_elastic(train, FLAGS.global_batch_size, FLAGS.accumulation_steps,
                 commit_every_n_steps=FLAGS.commit_every_n_steps)


if __name__ == "__main__":
  app.run(main)

"""A sharded table under accumulation: an exchange per micro-batch or update?

With accumulation k, each micro-batch's lookup exchanges its ids and rows
(two alltoalls forward, one back). The other way would send the update's
k micro-batches' ids at once (they are inputs, known before the loop) and
their rows' gradients once after it. This times the two exchanges alone, in
one job, rounds interleaved: per update, `per_micro_batch` runs k lookups
of m ids and their gradients in a loop (as `accumulation.py` does);
`per_update` one lookup of the k*m ids and its gradient.

    .venv/bin/horovodrun --gloo -np 2 -H localhost:2 .venv/bin/python \\
        -m tools.bench.sharded_accumulation --accumulation_steps=4

Prints each round's milliseconds per update and the ratio
per_micro_batch / per_update (above 1: batching is faster).
"""
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

from estimator_scale.backends.horovod import ranks
from estimator_scale.embeddings import sharded

flags.DEFINE_integer("vocabulary_size", 1 << 20, "the table's rows")
flags.DEFINE_integer("dimension", 32, "the vectors' length")
flags.DEFINE_integer("micro_batch_ids", 4096, "ids per micro-batch and rank")
flags.DEFINE_integer("accumulation_steps", 4, "micro-batches per update")
flags.DEFINE_integer("updates", 20, "updates per round and way")
flags.DEFINE_integer("rounds", 3, "rounds, each timing both ways")
FLAGS = flags.FLAGS


def _ids(count, vocabulary_size):
  """Log-uniform ids (frequent ones first, as click logs' are), new ones
  every run, hashed over the rows."""
  u = tf.random.uniform([count], 0.0, np.log(float(vocabulary_size)))
  return (tf.cast(tf.exp(u), tf.int64) * 2654435761) % vocabulary_size


def _gradient_sum(table, ids):
  """A scalar that needs the lookup of `ids` and the gradient of its rows
  on their way back to the owners."""
  vectors = sharded.lookup(table, ids)
  (grad,) = tf.gradients(tf.reduce_sum(vectors * vectors), [table])
  return tf.reduce_sum(grad.values)


def _per_micro_batch(table, k, m):
  def body(index, total):
    return index + 1, total + _gradient_sum(
        table, _ids(m, FLAGS.vocabulary_size))
  return tf.while_loop(lambda index, _: index < k, body,
                       [tf.constant(0), tf.constant(0.0)],
                       parallel_iterations=1)[1]


def _per_update(table, k, m):
  return _gradient_sum(table, _ids(k * m, FLAGS.vocabulary_size))


def main(argv):
  del argv
  hvd = ranks.import_horovod()
  hvd.init()
  k, m = FLAGS.accumulation_steps, FLAGS.micro_batch_ids
  table = sharded.make_table("table", FLAGS.vocabulary_size, FLAGS.dimension)
  ways = {"per_micro_batch": _per_micro_batch(table, k, m),
          "per_update": _per_update(table, k, m)}
  with tf.compat.v1.Session() as session:
    session.run([tf.compat.v1.global_variables_initializer(),
                 tf.compat.v1.local_variables_initializer()])
    for fetch in ways.values():  # warm up
      session.run(fetch)
    for round_index in range(FLAGS.rounds):
      seconds = {}
      for name, fetch in ways.items():
        start = time.perf_counter()
        for _ in range(FLAGS.updates):
          session.run(fetch)
        seconds[name] = (time.perf_counter() - start) / FLAGS.updates
      ratio = seconds["per_micro_batch"] / seconds["per_update"]
      if hvd.rank() == 0:
        print(f"round {round_index}: " + ", ".join(
            f"{name} {1000 * s:.1f} ms" for name, s in seconds.items()) +
              f"; ratio {ratio:.2f}", flush=True)


if __name__ == "__main__":
  tf.compat.v1.disable_eager_execution()
  app.run(main)

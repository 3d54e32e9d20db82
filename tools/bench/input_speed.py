r"""The framework's TFRecord input against a hand-tuned tf.data pipeline.

`es.inputs.from_tfrecords` reads in the fixed order its input position
needs (so a restart trains every example once), which a pipeline free to
read files as they come does not pay for. This bench says what that order
costs: both read the same Criteo-shaped files (13 floats, 26 int64 ids and
a label per tf.train.Example) in one process, in alternating rounds, and it
prints each round's examples/s and their ratio (framework / hand-tuned):

  nice -n 10 .venv/bin/python -m tools.bench.input_speed
  .venv/bin/python -m tools.bench.input_speed --examples=20000 --rounds=1

The hand-tuned pipeline is what tf.data's guide recommends: files
interleaved in parallel without order, shuffled, batched before a
vectorised parse, autotuned, prefetched.
"""
import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import tensorflow as tf

import estimator_scale as es

FLOATS = 13
IDS = 26


def feature_spec():
  spec = {f"I{i}": tf.io.FixedLenFeature([], tf.float32)
          for i in range(FLOATS)}
  spec.update({f"C{i}": tf.io.FixedLenFeature([], tf.int64)
               for i in range(IDS)})
  spec["label"] = tf.io.FixedLenFeature([], tf.int64)
  return spec


def write_files(directory, examples, files, seed=0):
  """Criteo-shaped TFRecords in `directory`; returns their glob."""
  rng = np.random.default_rng(seed)
  features = {f"I{i}": rng.standard_normal(examples).astype(np.float32)
              for i in range(FLOATS)}
  features.update({f"C{i}": rng.integers(0, 1 << 40, examples)
                   for i in range(IDS)})
  es.inputs.write_tfrecord_shards(features, rng.integers(0, 2, examples),
                                  directory, files)
  return os.path.join(directory, "*.tfrecord")


def framework(pattern, batch):
  return es.inputs.from_tfrecords(pattern, feature_spec(), "label", batch,
                                  seed=0)()


def hand_tuned(pattern, batch):
  spec = feature_spec()

  def parse(serialized):
    features = tf.io.parse_example(serialized, spec)
    return features, features.pop("label")
  files = tf.data.Dataset.list_files(pattern, shuffle=True, seed=0)
  return (files.interleave(tf.data.TFRecordDataset, cycle_length=8,
                           num_parallel_calls=tf.data.AUTOTUNE,
                           deterministic=False)
          .shuffle(10000, seed=0).repeat().batch(batch)
          .map(parse, num_parallel_calls=tf.data.AUTOTUNE)
          .prefetch(tf.data.AUTOTUNE))


def examples_per_second(dataset, batch, batches, warmup=20):
  """Examples/s over `batches` batches after `warmup` (the files opened,
  the shuffle buffer filled, autotuning settled)."""
  iterator = iter(dataset)
  for _ in range(warmup):
    next(iterator)
  start = time.perf_counter()
  for _ in range(batches):
    next(iterator)
  return batches * batch / (time.perf_counter() - start)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--examples", type=int, default=200_000)
  parser.add_argument("--files", type=int, default=8)
  parser.add_argument("--batch", type=int, default=512)
  parser.add_argument("--rounds", type=int, default=3)
  args = parser.parse_args(argv)
  batches = args.examples // args.batch
  with tempfile.TemporaryDirectory() as directory:
    pattern = write_files(directory, args.examples, args.files)
    ratios = []
    for round_ in range(args.rounds):
      ours = examples_per_second(framework(pattern, args.batch), args.batch,
                                 batches)
      theirs = examples_per_second(hand_tuned(pattern, args.batch),
                                   args.batch, batches)
      ratios.append(ours / theirs)
      print(f"round {round_ + 1}: from_tfrecords {ours:,.0f} examples/s, "
            f"hand-tuned {theirs:,.0f}, ratio {ratios[-1]:.2f}", flush=True)
  print(f"ratio from_tfrecords / hand-tuned: median {statistics.median(ratios):.2f}"
        f" (rounds {', '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
  main()

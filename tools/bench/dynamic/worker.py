"""One measurement of the dynamic bench, in a process of its own.

  quality  one epoch over the bench's click logs, then the exact AUC of the
           eval split's predictions and the rows each table holds;
  speed    examples/s over `--steps` updates after `--warmup` untimed ones;
  memory   one dynamic table fed only ids it never saw, 10x its capacity:
           resident memory after every update.
A fresh process per measurement, so no run inherits another's allocator
state; the result is one JSON file, `--out`.
"""
import argparse
import json
import os
import time

import numpy as np

MODES = ("quality", "speed", "memory")
TABLES = ("hashed", "dynamic", "tfra")
LEARNING_RATE = 0.05
MEMORY_BATCH = 8192
MEMORY_DIMENSION = 32


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--mode", choices=MODES, required=True)
  parser.add_argument("--table", choices=TABLES, default="dynamic")
  parser.add_argument("--data", help="data.prepare's folder")
  parser.add_argument("--rows", type=int, required=True,
                      help="buckets, or the dynamic table's capacity, per "
                           "column")
  parser.add_argument("--min_count", type=int, default=1)
  parser.add_argument("--dimension", type=int, default=8)
  parser.add_argument("--batch", type=int, default=512)
  parser.add_argument("--warmup", type=int, default=20)
  parser.add_argument("--steps", type=int, default=200)
  parser.add_argument("--repeating", type=int, default=0,
                      help="speed: fold each column's ids to this many "
                           "distinct ones (missing ones stay -1); 0: as "
                           "drawn")
  parser.add_argument("--seed", type=int, default=0,
                      help="the dense layers' (and TFRA's rows') seed")
  parser.add_argument("--model_dir", required=True)
  parser.add_argument("--out", required=True)
  return parser.parse_args(argv)


def resident_bytes():
  """This process's resident set (VmRSS), in bytes."""
  with open("/proc/self/status", encoding="ascii") as f:
    for line in f:
      if line.startswith("VmRSS:"):
        return int(line.split()[1]) * 1024
  raise RuntimeError("no VmRSS in /proc/self/status")


def _model(args, columns):
  """Each column's ids embedded (hashed or dynamic), concatenated, through
  one hidden layer to the click logit.

  Tables by hand, not feature columns, so that the hashed and the dynamic
  runs build the same network and differ in the lookup alone. Hashed ids
  are the raw ones modulo the buckets: raw ids are already well mixed.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import estimator_scale as es  # pylint: disable=g-import-not-at-top

  def embedded(name, ids):
    if args.table == "dynamic":
      vectors = es.dynamic_embedding(ids, args.dimension, args.rows,
                                     name=f"{name}_table",
                                     min_count=args.min_count)
    else:
      table = tf.compat.v1.get_variable(
          f"{name}_table", [args.rows, args.dimension],
          initializer=tf.compat.v1.random_uniform_initializer(
              -args.dimension ** -0.5, args.dimension ** -0.5))
      vectors = tf.nn.embedding_lookup(table,
                                       tf.math.floormod(ids, args.rows))
    present = tf.cast(ids >= 0, vectors.dtype)[:, None]
    return vectors * present

  class Clicks(es.BinaryClassifierModel):
    """The bench's click model."""

    name = None

    def logits(self, features, training, params):
      net = tf.concat([embedded(name, tf.reshape(features[name], [-1]))
                       for name in columns], 1)
      net = tf.keras.layers.Dense(32, tf.nn.relu, name="hidden")(net)
      return tf.keras.layers.Dense(1, name="logit")(net)

    def serving_features(self):
      return {name: tf.TensorSpec([1], tf.int64) for name in columns}

  return Clicks()


def _batches(features, labels, batch, repeat):
  """An input_fn over numpy arrays, batch by batch (no graph constants)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  names = tuple(features)

  def generator():
    while True:
      for start in range(0, len(labels) - batch + 1, batch):
        yield ({name: np.asarray(features[name][start:start + batch])
                for name in names},
               np.asarray(labels[start:start + batch]))
      if not repeat:
        return

  def input_fn():
    signature = ({name: tf.TensorSpec([batch], tf.int64) for name in names},
                 tf.TensorSpec([batch], tf.int64))
    return tf.data.Dataset.from_generator(
        generator, output_signature=signature).prefetch(2)
  return input_fn


class _Clock:
  """A SessionRunHook's after_run times and resident memory per update."""

  def __init__(self, track_memory):
    self.times, self.resident = [], []
    self.track_memory = track_memory

  def hook(self):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    clock = self

    class Hook(tf.estimator.SessionRunHook):
      def after_run(self, run_context, run_values):
        clock.times.append(time.perf_counter())
        if clock.track_memory:
          clock.resident.append(resident_bytes())
    return Hook()


def _estimator(args, columns):
  """(Estimator, TFRA's rows in use once trained, or None)."""
  if args.table == "tfra":
    from tools.bench.dynamic import tfra_model  # pylint: disable=g-import-not-at-top
    return tfra_model.estimator(columns, args.dimension, LEARNING_RATE,
                                args.model_dir, args.seed)
  import estimator_scale as es  # pylint: disable=g-import-not-at-top
  return es.make_estimator(
      _model(args, columns), model_dir=args.model_dir, distribution="none",
      training_config=es.TrainingConfig(
          optimizer="adagrad",
          learning_rate=LEARNING_RATE),
      random_seed=args.seed, save_checkpoints_steps=10 ** 9), None


def rows_in_use(model_dir):
  """Rows holding an id, summed over the checkpoint's dynamic tables."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  reader = tf.train.load_checkpoint(model_dir)
  return int(sum(np.count_nonzero(reader.get_tensor(name) >= 0)
                 for name, dtype in reader.get_variable_to_dtype_map().items()
                 if name.endswith("/ids") and dtype == tf.int64))


def quality(args):
  """One epoch, then the eval split's exact AUC."""
  from model_zoo import click_data  # pylint: disable=g-import-not-at-top
  from tools.bench.dynamic import data  # pylint: disable=g-import-not-at-top
  features, labels = data.load(args.data, "train")
  estimator, tfra_rows = _estimator(args, tuple(features))
  clock = _Clock(False)
  start = time.perf_counter()
  estimator.train(_batches(features, labels, args.batch, False),
                  hooks=[clock.hook()])
  seconds = time.perf_counter() - start
  held_out, held_labels = data.load(args.data, "eval")
  scores = np.array([p["logistic"][0] for p in estimator.predict(
      _batches(held_out, held_labels, args.batch, False))])
  used = None  # a hashed table: every row
  if args.table == "dynamic":
    used = rows_in_use(args.model_dir)
  elif args.table == "tfra":
    used = tfra_rows[0]
  return {"auc": click_data.auc(held_labels[:len(scores)], scores),
          "examples": len(clock.times) * args.batch, "seconds": seconds,
          "rows_in_use": used}


def speed(args):
  """Examples/s over the updates after the warm-up."""
  from tools.bench.dynamic import data  # pylint: disable=g-import-not-at-top
  features, labels = data.load(args.data, "train")
  if args.repeating:
    count = (args.warmup + args.steps) * args.batch
    features = {name: _folded(ids[:count], args.repeating)
                for name, ids in features.items()}
    labels = labels[:count]
  estimator, _ = _estimator(args, tuple(features))
  clock = _Clock(False)
  evicted = []
  hooks = [clock.hook()] + ([_evictions(evicted)]
                            if args.table == "dynamic" else [])
  estimator.train(_batches(features, labels, args.batch, True),
                  hooks=hooks, steps=args.warmup + args.steps)
  seconds = clock.times[-1] - clock.times[args.warmup - 1]
  result = {"examples_per_sec": args.steps * args.batch / seconds,
            "seconds": seconds}
  if evicted:
    result["evicted_per_update"] = evicted[0] / len(clock.times)
  return result


def _evictions(into):
  """A SessionRunHook that appends to `into`, as training ends, the rows the
  dynamic tables evicted in this process, per table: how many ids a column
  admitted in place of others."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from estimator_scale.embeddings import dynamic  # pylint: disable=g-import-not-at-top

  class Hook(tf.estimator.SessionRunHook):
    def begin(self):
      tables = dynamic.tables()
      self.mean = tf.add_n([t.usage()["evicted"] for t in tables]) / len(
          tables)

    def end(self, session):
      into.append(float(session.run(self.mean)))
  return Hook()


def _folded(ids, distinct):
  """`ids` mapped onto `distinct` of them, -1 (missing) kept."""
  ids = np.asarray(ids)
  return np.where(ids >= 0, ids % distinct, -1)


class _Drawn:
  """A column of `raw_id`s drawn a slice at a time: a memory run holding its
  whole stream would count it in the table's bytes per id, since the stream
  grows with the capacity."""

  def __init__(self, column, count, mask=-1):
    self.column, self.count, self.mask = column, count, mask

  def __len__(self):
    return self.count

  def __getitem__(self, where):
    from model_zoo import click_data  # pylint: disable=g-import-not-at-top
    ranks = np.arange(*where.indices(self.count), dtype=np.int64)
    return click_data.raw_id(self.column, ranks) & self.mask


def memory(args):
  """Resident bytes after each update of a stream of never-seen ids."""
  count = 10 * args.rows // MEMORY_BATCH * MEMORY_BATCH
  features = {"C1": _Drawn("C1", count)}
  labels = _Drawn("C2", count, mask=1)
  args.table, args.dimension = "dynamic", MEMORY_DIMENSION
  estimator, _ = _estimator(args, ("C1",))
  clock = _Clock(True)
  before = resident_bytes()
  estimator.train(_batches(features, labels, MEMORY_BATCH, False),
                  hooks=[clock.hook()])
  return {"resident_before": before, "resident": clock.resident,
          "batch": MEMORY_BATCH, "dimension": MEMORY_DIMENSION,
          "slots": 1, "rows_in_use": rows_in_use(args.model_dir)}


def main(argv=None):
  args = parse_args(argv)
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  result = {"quality": quality, "speed": speed, "memory": memory}[args.mode](
      args)
  with open(args.out, "w", encoding="utf-8") as f:
    json.dump(result, f)


if __name__ == "__main__":
  main()

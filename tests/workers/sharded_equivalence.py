"""A Horovod rank training one model twice: table sharded, table replicated.

For each configuration of `CONFIGS` (optimizer, accumulation steps, lr
scaling) the rank trains `--steps` updates with the table made by
`es.sharded_embedding`, then the same model with the table an ordinary
variable, from the same initial values (a per-row initializer: the shard
draws exactly its rows of the whole table), and writes
`<out_dir>/<config>-<kind>-rank<r>.npz`: the model's variables (the shard
and its optimizer slots included, as this rank holds them) and AdaScale's
state, as training ends and (keys prefixed `start:`) before its first
update, after any restore. The kinds `keras` and `column` make the sharded
table through `es.ShardedEmbedding` and `es.sharded_embedding_column`; the
dump names every kind's table `model/table`. One job checks every
configuration, so a rank count costs one horovodrun; a second job on the
same --model_dir restarts from the first one's checkpoints.

`--compression_check` also looks one batch up with and without fp16
compression and writes `compression-rank<r>.npz` (vectors, the shard's
gradient, the dtypes the alltoalls carry). `--initializer_check` trains a
table made with each of TF 2's own initializers of `INITIALIZERS` a few
updates and writes `initializers-rank<r>.npz` (each shard before and after,
its first row, the losses).
"""
import os

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

import estimator_scale as es
from estimator_scale.backends.horovod import ranks
from estimator_scale.embeddings import sharded

FLAGS = flags.FLAGS

VOCABULARY = 50
DIMENSION = 4
LOOKUPS = 5
EXAMPLES = 96
CONFIGS = {  # name: (optimizer, accumulation steps, lr scaling)
    "sgd-k1": ("sgd", 1, "identity"),
    "adagrad-k1-adascale": ("adagrad", 1, "adascale"),
    "sgd-k4-adascale": ("sgd", 4, "adascale"),
    "adagrad-k4": ("adagrad", 4, "identity"),
    "momentum-k2-cowclip": ("momentum", 2, "cowclip"),
}
COWCLIP_RATIO = 1e-3
"""r of the cowclip configuration: every row clipped, so each moves by its
id's count in the update, whichever ranks looked it up."""


def _define_flags():
  """Defined when run as a script only (tests import this module)."""
  flags.DEFINE_string("out_dir", None, "where the variables go")
  flags.DEFINE_string("model_dir", None, "a directory per run is made in it")
  flags.DEFINE_integer("steps", 20, "updates")
  flags.DEFINE_integer("global_batch_size", 24, "")
  flags.DEFINE_string("configs", ",".join(CONFIGS), "which of CONFIGS")
  flags.DEFINE_string("kinds", "sharded,replicated", "which tables")
  flags.DEFINE_string("layer_configs", "", "configs also trained with the "
                      "Keras layer and the feature column")
  flags.DEFINE_integer("save_checkpoints_steps", 1000, "")
  flags.DEFINE_bool("evaluate", False, "evaluate, predict and export too")
  flags.DEFINE_bool("compression_check", False, "look up with fp16 too")
  flags.DEFINE_bool("initializer_check", False,
                    "train tables of TF 2's own initializers")


def row_initializer(shape, dtype=None, partition_info=None):
  """Row i of the whole table is a function of i alone, so a shard made
  with its offset holds exactly its rows of the replicated table."""
  offset = partition_info.var_offset[0] if partition_info else 0
  rows = tf.cast(tf.range(offset, offset + shape[0]), tf.float32)
  cols = tf.cast(tf.range(shape[1]), tf.float32)
  values = 0.3 * tf.sin(rows[:, None] * 1.7 + cols[None, :] * 0.9 + 0.2)
  return tf.cast(values, dtype or tf.float32)


def token_data():
  """(features, labels): LOOKUPS ids per example, skewed to small ids, so
  that ranks ask each other for the same rows."""
  rng = np.random.RandomState(3)
  ids = np.minimum(rng.geometric(0.08, (EXAMPLES, LOOKUPS)) - 1,
                   VOCABULARY - 1)
  labels = (ids.sum(1) % 3).astype(np.int64)
  return {"ids": ids.astype(np.int64)}, labels


TABLES = {  # kind: the table's variable name
    "sharded": "model/table",
    "replicated": "model/table",
    "keras": "model/table/embeddings",
    "column": "model/input_layer/ids_embedding/embedding_weights",
    "dynamic": "model/table",
}


class Tokens(es.ClassifierModel):
  """Mean of the looked-up rows, then a linear layer; `kind` says how the
  table is made (a key of `TABLES`)."""

  name = None

  def __init__(self, kind):
    self.kind = kind

  def logits(self, features, training, params):
    ids = features["ids"]
    if self.kind == "sharded":
      mean = tf.reduce_mean(es.sharded_embedding(
          ids, VOCABULARY, DIMENSION, name="table",
          initializer=row_initializer), 1)
    elif self.kind == "keras":
      mean = tf.reduce_mean(es.ShardedEmbedding(
          VOCABULARY, DIMENSION, embeddings_initializer=row_initializer,
          name="table")(ids), 1)
    elif self.kind == "column":
      ids_column = tf.feature_column.categorical_column_with_identity(
          "ids", VOCABULARY)
      mean = tf.compat.v1.feature_column.input_layer(features, [
          es.sharded_embedding_column(ids_column, DIMENSION,
                                      initializer=row_initializer)])
    elif self.kind == "dynamic":
      # Room for every id, so re-sharding keeps them all; admitted at their
      # second sighting and freed after 3 updates unseen.
      mean = tf.reduce_mean(es.dynamic_embedding(
          ids, DIMENSION, capacity=2 * VOCABULARY, name="table", min_count=2,
          steps_to_live=3), 1)
    else:
      table = tf.compat.v1.get_variable("table", [VOCABULARY, DIMENSION],
                                        initializer=row_initializer)
      mean = tf.reduce_mean(tf.nn.embedding_lookup(table, ids), 1)
    return tf.compat.v1.layers.dense(
        mean, 3, name="out",
        kernel_initializer=tf.compat.v1.glorot_uniform_initializer(seed=1))

  def serving_features(self):
    return {"ids": tf.TensorSpec([LOOKUPS], tf.int64)}


class DumpHook(tf.compat.v1.train.SessionRunHook):
  """Keeps the model's and AdaScale's variables before the first update
  and as training ends; the table (and its slots) as `model/table`."""

  def __init__(self, table):
    self._table = table

  def begin(self):
    every = (tf.compat.v1.global_variables() +
             tf.compat.v1.local_variables())
    self._variables = {
        v.op.name.replace(self._table, TABLES["sharded"]): v for v in every
        if v.op.name.startswith(("model/", "adascale/"))}
    self.start = None

  def before_run(self, run_context):
    # Not in after_create_session: the backend's hooks, which restore the
    # shards there, come after the caller's.
    if self.start is None:
      self.start = run_context.session.run(self._variables)

  def end(self, session):
    self.values = session.run(self._variables)
    self.values.update({f"start:{k}": v for k, v in self.start.items()})


def train(name, kind, out_dir, model_dir):
  """Trains configuration `name`, one table kind; writes this rank's dump."""
  optimizer, k, lr_scaling = CONFIGS[name]
  config = es.TrainingConfig(
      optimizer=optimizer, learning_rate=0.5,
      accumulation_steps=k, lr_scaling=lr_scaling,
      **(dict(cowclip_ratio=COWCLIP_RATIO, batch_scale=2)
         if lr_scaling == "cowclip" else {}))
  estimator = es.make_estimator(
      Tokens(kind), model_dir=os.path.join(model_dir, f"{name}-{kind}"),
      distribution="horovod", training_config=config, random_seed=0,
      save_checkpoints_steps=FLAGS.save_checkpoints_steps)
  topology = estimator.topology
  features, labels = token_data()
  hook = DumpHook(TABLES[kind])
  estimator.train(es.inputs.from_arrays(
      features, labels, FLAGS.global_batch_size, topology=topology,
      accumulation_steps=k, seed=None), hooks=[hook], max_steps=FLAGS.steps)
  values = hook.values
  if FLAGS.evaluate:
    values.update(_scores(estimator, features, labels,
                          os.path.join(model_dir, f"{name}-{kind}-export")))
  np.savez(os.path.join(out_dir, f"{name}-{kind}-rank"
                        f"{topology.worker_index}.npz"), **values)


def _scores(estimator, features, labels, export_dir_base):
  """The trained model's evaluation loss, predicted logits, and the logits
  of its export, served in this process."""
  whole = es.inputs.from_arrays(features, labels, 32, training=False)
  loss = estimator.evaluate(whole)["loss"]
  predicted = np.stack([p["logits"] for p in estimator.predict(
      es.inputs.from_arrays(features, None, 32, training=False))])
  path = estimator.export_saved_model(export_dir_base)
  serve = tf.saved_model.load(path).signatures["serving_default"]
  served = serve(ids=tf.constant(features["ids"]))["logits"].numpy()
  return {"eval:loss": loss, "predict:logits": predicted,
          "served:logits": served}


def compression_check(out_dir):
  """Looks a batch up in one table with and without fp16 compression, and
  differentiates a weighted sum of the vectors; writes what came back."""
  rank = ranks.import_horovod().rank()
  values, exchanged = {}, {}
  with tf.Graph().as_default():
    ids = tf.constant(np.arange(rank, VOCABULARY, 3 + rank), tf.int64)
    weights = 1.0 / 3.0 + tf.cast(tf.range(tf.size(ids) * DIMENSION),
                                  tf.float32) / 7.0
    for compression in ("none", "fp16"):
      with tf.compat.v1.variable_scope(compression):
        vectors = es.sharded_embedding(
            ids, VOCABULARY, DIMENSION, name="table",
            initializer=row_initializer, compression=compression)
        (shard,) = tf.compat.v1.get_collection(
            sharded.COLLECTION, scope=compression)
        loss = tf.reduce_sum(tf.reshape(vectors, [-1]) * weights)
        (grad,) = tf.gradients(loss, [shard])
        values[f"{compression}:vectors"] = vectors
        values[f"{compression}:grad"] = tf.convert_to_tensor(grad)
        exchanged[f"{compression}:exchanged"] = np.array([
            op.inputs[0].dtype.name for op in
            tf.compat.v1.get_default_graph().get_operations()
            if op.type == "HorovodAlltoall" and f"{compression}/" in op.name
            and op.inputs[0].dtype.is_floating])
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.local_variables_initializer())
      got = session.run(values)
  np.savez(os.path.join(out_dir, f"compression-rank{rank}.npz"), **got,
           **exchanged)


CONSTANT_TABLE = np.arange(VOCABULARY * DIMENSION, dtype=np.float32).reshape(
    VOCABULARY, DIMENSION) / 100.0

INITIALIZERS = {  # TF 2's own: neither v1 nor Keras initializers
    "normal": tf.random_normal_initializer(seed=1),
    "constant": tf.constant_initializer(CONSTANT_TABLE),
}


def initializer_check(out_dir, steps=5):
  """Trains a sharded table of each of `INITIALIZERS` `steps` SGD updates
  towards zero; writes each shard before and after, and the losses."""
  rank = ranks.import_horovod().rank()
  fetches, train = {}, []
  with tf.Graph().as_default():
    ids = tf.constant(np.arange(rank, VOCABULARY, 2), tf.int64)
    for name, initializer in INITIALIZERS.items():
      with tf.compat.v1.variable_scope(name):
        vectors = es.sharded_embedding(ids, VOCABULARY, DIMENSION,
                                       name="table", initializer=initializer)
        (shard,) = tf.compat.v1.get_collection(sharded.COLLECTION, scope=name)
        loss = tf.reduce_mean(tf.square(vectors))
        train.append(tf.compat.v1.train.GradientDescentOptimizer(
            20.0).minimize(loss, var_list=[shard]))
        fetches[name] = (shard, loss)
        first_row = shard._save_slice_info.var_offset[0]  # pylint: disable=protected-access
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.local_variables_initializer())
      start = session.run(fetches)
      for _ in range(steps):
        session.run(train)
      end = session.run(fetches)
  values = {"first_row": first_row}
  for name in INITIALIZERS:
    values.update({f"{name}:start": start[name][0], f"{name}:end": end[name][0],
                   f"{name}:first_loss": start[name][1],
                   f"{name}:last_loss": end[name][1]})
  np.savez(os.path.join(out_dir, f"initializers-rank{rank}.npz"), **values)


def main(argv):
  del argv
  os.makedirs(FLAGS.out_dir, exist_ok=True)
  for name in FLAGS.configs.split(","):
    layers = ["keras", "column"] if name in FLAGS.layer_configs.split(
        ",") else []
    for kind in FLAGS.kinds.split(",") + layers:
      train(name, kind, FLAGS.out_dir, FLAGS.model_dir)
  if FLAGS.compression_check:
    compression_check(FLAGS.out_dir)
  if FLAGS.initializer_check:
    initializer_check(FLAGS.out_dir)


if __name__ == "__main__":
  _define_flags()
  app.run(main)

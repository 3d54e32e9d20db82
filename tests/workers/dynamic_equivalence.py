"""Trains a model with a dynamic table, on one process, as Horovod ranks or
as TF_CONFIG workers over parameter servers.

The same global batches reach the table either way (each rank takes its
slice of each), with ids that come and go: a few frequent ids, bursts of
rare ones seen once or twice (min_count=2 admits the second sighting) and
ids that stop coming (steps_to_live frees them, and some come back). The
test compares the tables each run leaves in its checkpoint (Horovod's:
the ranks' slices merged), id by id; --hashed_rows adds a static table
beside it. With --dump_dir each rank writes the
table's variables as it holds them (its rows and their slots) to
`<dump_dir>/<event>-<step>-of<size>-rank<r>.npz`: `start` before the
session's first update (after any restore), `end` as training ends. With
--export_dir the chief exports each config's model as it ends, and with
--compact_export_dir it exports it as COMPACT says. With --evaluate each
config is evaluated on its training data, the metrics in its model_dir.
"""
import json
import os

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

import estimator_scale as es
from tests.helpers import dumps

FLAGS = flags.FLAGS

DIMENSION = 4
LOOKUPS = 3
EXAMPLES = 320
TABLE = "model/table"
HASHED = "model/hashed/embeddings"


def _define_flags():
  """Defined when run as a script only (tests import this module)."""
  flags.DEFINE_string("model_dir", None, "a directory per config in it")
  flags.DEFINE_string("distribution", "none",
                      "none, horovod or parameter_server")
  flags.DEFINE_bool("ps_sync", False, "synchronous parameter servers")
  flags.DEFINE_integer("steps", 20, "updates")
  flags.DEFINE_integer("global_batch_size", 16, "")
  flags.DEFINE_list("configs", list(CONFIGS), "the CONFIGS to train")
  flags.DEFINE_string("dump_dir", None, "where each rank writes its rows")
  flags.DEFINE_integer("capacity", 120, "the table's rows")
  flags.DEFINE_integer("hashed_rows", 0, "rows of a static table of the "
                       "ids modulo them beside the dynamic one (0: none)")
  flags.DEFINE_integer("full_checkpoint_every", 1,
                       "saves per full checkpoint; deltas in between")
  flags.DEFINE_integer("save_checkpoints_steps", 100, "")
  flags.DEFINE_string("export_dir", None,
                      "where the chief exports each config's model")
  flags.DEFINE_bool("evaluate", False,
                    "evaluate each config on its training data after it "
                    "trains; the chief writes <model_dir>/<config>/eval.json")
  flags.DEFINE_string("compact_export_dir", None,
                      "where the chief exports each config's model as "
                      "COMPACT says")


def id_data():
  """(features, labels): LOOKUPS raw 60-bit ids per example, in order of
  arrival: the first half draws from 40 ids, the second from 40 others
  and 10 of the first (the other 30 stop coming)."""
  rng = np.random.RandomState(5)
  pool = rng.randint(0, 1 << 60, size=80, dtype=np.int64)
  half = EXAMPLES // 2
  first = pool[np.minimum(rng.geometric(0.1, (half, LOOKUPS)) - 1, 39)]
  later = np.concatenate([pool[:10], pool[40:]])
  second = later[np.minimum(rng.geometric(0.06, (half, LOOKUPS)) - 1, 49)]
  ids = np.concatenate([first, second])
  labels = ((ids % 7).sum(1) % 2).astype(np.int64)
  return {"ids": ids}, labels


class RawIds(es.BinaryClassifierModel):
  """Mean of the ids' vectors, then one logit."""

  name = None

  def logits(self, features, training, params):
    vectors = es.dynamic_embedding(features["ids"], DIMENSION,
                                   capacity=FLAGS.capacity,
                                   name="table", min_count=2,
                                   steps_to_live=4)
    if FLAGS.hashed_rows:
      vectors += tf.keras.layers.Embedding(
          FLAGS.hashed_rows, DIMENSION, name="hashed")(
              features["ids"] % FLAGS.hashed_rows)
    return tf.compat.v1.layers.dense(
        tf.reduce_mean(vectors, 1), 1, name="out",
        kernel_initializer=tf.compat.v1.constant_initializer(0.5))

  def serving_features(self):
    return {"ids": tf.TensorSpec([LOOKUPS], tf.int64)}


COMPACT = es.CompactExport(min_count=3, dtype="int8")
"""The compact export of --compact_export_dir."""

CONFIGS = {"adagrad": dict(optimizer="adagrad"), "adam": dict(optimizer="adam"),
           "cowclip": dict(optimizer="adagrad", lr_scaling="cowclip",
                           batch_scale=2, cowclip_ratio=1e-3)}
"""name: the TrainingConfig of each configuration a run trains. Not
AdaScale: its gain depends on S, 1 on one process and 2 on two ranks.
CowClip's r is small enough to clip every row, so each row moves by its
id's count in the update, whichever rank looked it up."""


def main(argv):
  del argv
  features, labels = id_data()
  for name in FLAGS.configs:
    config = es.TrainingConfig(learning_rate=0.1, **CONFIGS[name])
    estimator = es.make_estimator(
        RawIds(), model_dir=os.path.join(FLAGS.model_dir, name),
        distribution=FLAGS.distribution, training_config=config,
        random_seed=0, full_checkpoint_every=FLAGS.full_checkpoint_every,
        save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        **({"ps_sync": True} if FLAGS.ps_sync else {}))
    hooks = []
    if FLAGS.dump_dir:
      os.makedirs(FLAGS.dump_dir, exist_ok=True)
      hooks.append(dumps.DumpHook(estimator.topology, FLAGS.dump_dir,
                                  (TABLE, HASHED)))
    estimator.train(es.inputs.from_arrays(features, labels,
                                          FLAGS.global_batch_size, seed=None),
                    hooks=hooks, max_steps=FLAGS.steps)
    if FLAGS.evaluate:
      metrics = estimator.evaluate(es.inputs.from_arrays(
          features, labels, FLAGS.global_batch_size, training=False))
      if estimator.topology.is_chief:
        with open(os.path.join(FLAGS.model_dir, name, "eval.json"), "w") as f:
          json.dump({k: float(v) for k, v in metrics.items()}, f)
    for base, compact in ((FLAGS.export_dir, None),
                          (FLAGS.compact_export_dir, COMPACT)):
      if base:  # every rank calls: the chief exports
        estimator.export_saved_model(os.path.join(base, name),
                                     RawIds().serving_input_receiver_fn(),
                                     compact=compact)


if __name__ == "__main__":
  _define_flags()
  app.run(main)

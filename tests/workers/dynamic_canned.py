"""A worker for tests/integration/test_dynamic_canned_horovod.py and
test_dynamic_canned_restore.py: a canned DNNClassifier over two dynamic
embedding columns, trained through `es.make_estimator` on one process or
on Horovod ranks, resuming what the model_dir holds.

Each example has its own random user and item and a random label, which
only the ids' own rows can memorise. The chief evaluates on every example,
predicts the first `KNOWN`, exports a SavedModel to `<out_dir>/export` and
writes `<out_dir>/result.json`.
"""
import json
import os

from absl import app
from absl import flags
import tensorflow as tf

import estimator_scale as es
from tests.helpers.dynamic_canned import (BATCH, CAPACITY, EXAMPLES, KNOWN,
                                           data)

flags.DEFINE_string("distribution", "none", "backend")
flags.DEFINE_string("model_dir", None, "shared checkpoint directory")
flags.DEFINE_string("out_dir", None, "where the results go")
flags.DEFINE_integer("steps", 200, "updates")
FLAGS = flags.FLAGS

def _canned(scale_config):
  columns = [es.dynamic_embedding_column(
      tf.feature_column.categorical_column_with_hash_bucket(
          key, 10, dtype=tf.int64), 8, capacity=capacity)
             for key, capacity in CAPACITY.items()]
  return tf.estimator.DNNClassifier(
      [16], columns, optimizer=es.canned_optimizer(
          tf.keras.optimizers.legacy.Adagrad(0.1), scale_config),
      config=scale_config.run_config)


def _export(estimator):
  receiver = tf.estimator.export.build_raw_serving_input_receiver_fn(
      {key: tf.zeros([1, 1], tf.int64) for key in CAPACITY})
  os.makedirs(FLAGS.out_dir, exist_ok=True)
  return estimator.export_saved_model(
      os.path.join(FLAGS.out_dir, "export"), receiver).decode()


def main(argv):
  del argv
  scale_config = es.build_run_config(FLAGS.distribution,
                                     model_dir=FLAGS.model_dir, random_seed=0)
  estimator = es.make_estimator(_canned(scale_config),
                                scale_config=scale_config)
  features, labels = data()
  estimator.train(es.inputs.from_arrays(features, labels, BATCH,
                                        topology=estimator.topology),
                  max_steps=FLAGS.steps)
  metrics = estimator.evaluate(es.inputs.from_arrays(
      features, labels, EXAMPLES, training=False))
  exported = _export(estimator)  # every rank: the chief's path comes back
  if not estimator.topology.is_chief:
    return
  predicted = [float(p["logistic"][0]) for p in estimator.predict(
      es.inputs.from_arrays({k: v[:KNOWN] for k, v in features.items()},
                            None, KNOWN, training=False))]
  with open(os.path.join(FLAGS.out_dir, "result.json"), "w",
            encoding="utf-8") as f:
    json.dump({"accuracy": float(metrics["accuracy"]),
               "global_step": int(metrics["global_step"]),
               "predicted": predicted, "export": exported}, f)


if __name__ == "__main__":
  app.run(main)

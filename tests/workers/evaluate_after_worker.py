"""A parameter-server job whose chief evaluates on the ps tasks only once
its worker's process has exited (tests/integration/test_ps_evaluation.py).

The chief writes `<out>` with its metrics; the worker trains and exits.
"""
import json
import os
import sys

from absl import logging
import numpy as np
import tensorflow as tf

import estimator_scale as es
from estimator_scale.backends import cluster_exit

ROWS, DIM = 1024, 4


class OneTable(es.BinaryClassifierModel):
  name = None

  def logits(self, features, training, params):
    table = tf.compat.v1.get_variable("table", [ROWS, DIM])
    vectors = tf.reshape(tf.nn.embedding_lookup(table, features["ids"]),
                         [-1, DIM])
    return tf.keras.layers.Dense(1, name="logit")(vectors)

  def serving_features(self):
    return {"ids": tf.TensorSpec([1], tf.int64)}


def main(model_dir, out):
  logging.set_verbosity(logging.INFO)  # the "Evaluating on the ps" line
  rng = np.random.RandomState(0)
  features = {"ids": rng.randint(0, ROWS, size=(512, 1))}
  labels = rng.randint(0, 2, size=512)
  estimator = es.make_estimator(OneTable(), model_dir=model_dir,
                                distribution="parameter_server",
                                random_seed=0)
  estimator.train(es.inputs.from_arrays(features, labels, 64), max_steps=10)
  if not estimator.topology.is_chief:
    return
  worker, = json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"]
  if cluster_exit.wait_until_gone([worker], timeout=120):
    sys.exit(f"the worker at {worker} still listens after 120 s")
  metrics = estimator.evaluate(
      es.inputs.from_arrays(features, labels, 64, training=False))
  with open(out, "w", encoding="utf-8") as f:
    json.dump({k: float(v) for k, v in metrics.items()}, f)


if __name__ == "__main__":
  main(*sys.argv[1:])

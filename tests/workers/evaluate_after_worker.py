"""A parameter-server job whose chief evaluates and predicts on the ps
tasks only once its worker's process has exited
(tests/integration/test_ps_evaluation.py).

The chief writes `<out>` with its metrics, the devices of its predicting
graph's variables, and `<out>.npy` with its predictions of `FEATURES`;
the worker trains and exits. With a third argument, `alone`, the process
only predicts from `<model_dir>` into `<out>.npy`, as the task its
TF_CONFIG names, without training (so without a server of its own).
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
_RNG = np.random.RandomState(0)
FEATURES = {"ids": _RNG.randint(0, ROWS, size=(512, 1))}
LABELS = _RNG.randint(0, 2, size=512)


class OneTable(es.BinaryClassifierModel):
  name = None

  def logits(self, features, training, params):
    table = tf.compat.v1.get_variable("table", [ROWS, DIM])
    vectors = tf.reshape(tf.nn.embedding_lookup(table, features["ids"]),
                         [-1, DIM])
    return tf.keras.layers.Dense(1, name="logit")(vectors)

  def serving_features(self):
    return {"ids": tf.TensorSpec([1], tf.int64)}


def main(model_dir, out, alone=None):
  logging.set_verbosity(logging.INFO)  # the "Evaluating on the ps" line
  estimator = es.make_estimator(OneTable(), model_dir=model_dir,
                                distribution="parameter_server",
                                random_seed=0)
  if alone:
    np.save(f"{out}.npy", predictions(estimator))
    return
  estimator.train(es.inputs.from_arrays(FEATURES, LABELS, 64), max_steps=10)
  if not estimator.topology.is_chief:
    return
  worker, = json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"]
  if cluster_exit.wait_until_gone([worker], timeout=120):
    sys.exit(f"the worker at {worker} still listens after 120 s")
  metrics = estimator.evaluate(
      es.inputs.from_arrays(FEATURES, LABELS, 64, training=False))
  devices = _Devices()
  np.save(f"{out}.npy", predictions(estimator, hooks=[devices]))
  with open(out, "w", encoding="utf-8") as f:
    json.dump({"metrics": {k: float(v) for k, v in metrics.items()},
               "devices": devices.devices}, f)


class _Devices(tf.compat.v1.train.SessionRunHook):
  """Where the predicting graph's variables are."""

  def begin(self):
    self.devices = {v.op.name: v.device
                    for v in tf.compat.v1.global_variables()}


def predictions(estimator, **kwargs):
  """The logistic scores of `FEATURES`, in their order."""
  return np.concatenate([batch["logistic"].reshape(-1) for batch in
                         estimator.predict(es.inputs.from_arrays(
                             FEATURES, LABELS, 64, training=False),
                                           yield_single_examples=False,
                                           **kwargs)])


if __name__ == "__main__":
  main(*sys.argv[1:])

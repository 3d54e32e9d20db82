"""Canned estimators over dynamic embedding columns, on one process.

A canned estimator trains the variables its Keras model lists and nothing
else, so a table the feature layer did not list would stay at its
initial vectors while everything around it trains: the ids' labels would
not be learnt. Its export must serve with TensorFlow alone, an id never
admitted reading the default vector (zeros), as a missing id does.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es

_EXAMPLES = 200
_UNSEEN = [3, 5]
"""Ids no training example has: never admitted."""
_MISSING = -1
"""What an integer categorical column drops: an example without an id."""

_SERVE = (
    "import json, sys\n"
    "import tensorflow as tf\n"
    "predict = tf.saved_model.load(sys.argv[1]).signatures['predict']\n"
    "ids = {k: tf.constant(v, tf.int64)[:, None]\n"
    "       for k, v in json.loads(sys.argv[2]).items()}\n"
    "x = tf.zeros([len(ids['user']), 1])\n"
    "out = predict(x=x, **ids)['logistic'].numpy()[:, 0]\n"
    "print(json.dumps(out.tolist()))\n")
"""The serving process: TensorFlow, no estimator_scale."""


def _data():
  """Random users and items, each example's label its own to memorise."""
  rng = np.random.RandomState(0)
  users = rng.randint(1 << 20, 1 << 60, _EXAMPLES, dtype=np.int64)
  items = rng.randint(1 << 20, 1 << 60, _EXAMPLES, dtype=np.int64)
  features = {"user": users[:, None], "item": items[:, None],
              "x": np.zeros((_EXAMPLES, 1), np.float32)}
  return features, rng.randint(0, 2, _EXAMPLES).astype(np.int64)


def _canned(kind, scale_config):
  columns = [es.dynamic_embedding_column(
      tf.feature_column.categorical_column_with_hash_bucket(
          key, 10, dtype=tf.int64), 8, capacity=capacity)
             for key, capacity in (("user", 400), ("item", 300))]
  adagrad = es.canned_optimizer(tf.keras.optimizers.legacy.Adagrad(0.1),
                                scale_config)
  if kind == "DNNClassifier":
    return tf.estimator.DNNClassifier([16], columns, optimizer=adagrad,
                                      config=scale_config.run_config)
  return tf.estimator.DNNLinearCombinedClassifier(
      linear_feature_columns=[tf.feature_column.numeric_column("x")],
      linear_optimizer=es.canned_optimizer(
          tf.keras.optimizers.legacy.Ftrl(0.1), scale_config),
      dnn_feature_columns=columns, dnn_optimizer=adagrad,
      dnn_hidden_units=[16], config=scale_config.run_config)


def _serve(exported, ids):
  out = subprocess.run(
      [sys.executable, "-c", _SERVE, os.fsdecode(exported), json.dumps(ids)],
      capture_output=True, text=True, check=True,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  return np.array(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("kind", ["DNNClassifier",
                                  "DNNLinearCombinedClassifier"])
def test_a_canned_estimator_trains_evaluates_and_exports_dynamic_tables(
    kind, tmp_path):
  scale_config = es.build_run_config("none", model_dir=str(tmp_path / "model"),
                                     random_seed=0)
  estimator = es.make_estimator(_canned(kind, scale_config),
                                scale_config=scale_config)
  features, labels = _data()
  estimator.train(es.inputs.from_arrays(features, labels, 50,
                                        topology=estimator.topology),
                  max_steps=200)
  metrics = estimator.evaluate(es.inputs.from_arrays(
      features, labels, _EXAMPLES, training=False))
  assert metrics["global_step"] == 200
  # Random labels: only the ids' own rows, trained, can memorise them.
  assert metrics["accuracy"] >= 0.95, metrics

  names = estimator.get_variable_names()
  for key in ("user", "item"):
    table = f"input_from_feature_columns/input_layer/{key}_embedding/" \
            "embedding_weights"
    held = estimator.get_variable_value(f"{table}/ids")
    assert np.count_nonzero(held >= 0) == _EXAMPLES, table
    assert f"training/Adagrad/{table}/accumulator" in names

  receiver = tf.estimator.export.build_raw_serving_input_receiver_fn({
      "user": tf.zeros([1, 1], tf.int64), "item": tf.zeros([1, 1], tf.int64),
      "x": tf.zeros([1, 1], tf.float32)})
  exported = estimator.export_saved_model(str(tmp_path / "export"), receiver)
  known = 20
  predicted = np.array([p["logistic"][0] for p in estimator.predict(
      es.inputs.from_arrays({k: v[:known] for k, v in features.items()},
                            None, known, training=False))])
  served = _serve(exported, {
      key: [int(i) for i in features[key][:known, 0]] + _UNSEEN + [_MISSING]
      for key in ("user", "item")})
  np.testing.assert_allclose(served[:known], predicted, rtol=1e-5, atol=1e-6)
  # Never admitted: the default vector, as an example without ids reads.
  np.testing.assert_allclose(served[known:], served[-1], rtol=1e-6)

"""AdaScale with a gain per part (`adascale_parts`) against numpy.

An embedding row's gradient is noisy in its own way (only the examples that
hold its id reach it), so each part's gain must come from its own norms.
"""
import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale import errors
from tests.helpers import trainer
from tests.workers import tiny_models

TABLE = np.array([[1.0, -2.0], [0.5, 3.0], [-1.5, 0.25]], np.float32)
KERNEL = 0.5
IDS = np.array([0, 1, 2, 0])
LR = 0.1


class TableLinear(es.BaseModel):
  """loss = mean over examples of the sum of kernel x the id's row."""

  name = None

  def logits(self, features, training, params):
    table = tf.compat.v1.get_variable(
        "table", TABLE.shape,
        initializer=tf.compat.v1.constant_initializer(TABLE))
    rows = tf.nn.embedding_lookup(table, features["id"])
    return tf.compat.v1.layers.dense(
        rows, 1, use_bias=False, name="linear",
        kernel_initializer=tf.compat.v1.constant_initializer(KERNEL))

  def loss(self, labels, logits, params):
    return tf.reduce_mean(logits)

  def serving_features(self):
    return {"id": tf.TensorSpec([], tf.int64)}


def _gain(samples, scale):
  """AdaScale's gain (theta = 0) from [sum ||g_i||^2, ||mean||^2]."""
  sum_sq, mean_sq = samples
  var = (sum_sq - 2 * mean_sq) * scale / 2
  sqr = max(mean_sq - var / scale, 0.0)
  var = max(var, 1e-6)
  return (var + sqr) / (var / scale + sqr)


def _numpy_run(updates):
  """(table, kernel, [(tables' gain, dense gain)], tau): SGD, k = 2 micro-
  batches of 2 examples, S = 2, both micro-batches per update."""
  table, kernel = TABLE.astype(np.float64), np.full(2, KERNEL)
  gains, tau = [], 0.0
  for _ in range(updates):
    table_grads, kernel_grads = [], []
    for ids in (IDS[:2], IDS[2:]):
      grad = np.zeros_like(table)
      for i in ids:
        grad[i] += kernel / len(ids)
      table_grads.append(grad)
      kernel_grads.append(table[ids].mean(0))
    per_part = []
    for grads in (table_grads, kernel_grads):
      mean = sum(grads) / 2
      per_part.append(_gain((sum((g ** 2).sum() for g in grads),
                             (mean ** 2).sum()), 2.0))
    gains.append(tuple(per_part))
    table = table - per_part[0] * LR * sum(table_grads) / 2
    kernel = kernel - per_part[1] * LR * sum(kernel_grads) / 2
    tau += per_part[1]
  return table, kernel, gains, tau


def test_gain_per_part_matches_numpy(tmp_path):
  estimator = trainer.train(
      TableLinear(), {"id": IDS}, np.zeros(len(IDS)), tmp_path, 4, 3,
      optimizer="sgd", learning_rate=LR, lr_scaling="adascale",
      accumulation_steps=2, adascale_smoothing=0.0,
      adascale_parts="embeddings,dense")
  table, kernel, gains, tau = _numpy_run(3)
  value = estimator.get_variable_value
  # The parts' gains differ, so one gain for both could not pass this.
  assert abs(gains[-1][0] - gains[-1][1]) > 0.1
  assert float(value("adascale/embeddings/gain")) == pytest.approx(
      gains[-1][0], rel=1e-5)
  assert float(value("adascale/gain")) == pytest.approx(gains[-1][1],
                                                        rel=1e-5)
  assert float(value("adascale/progress")) == pytest.approx(tau, rel=1e-5)
  np.testing.assert_allclose(value("model/table"), table, rtol=1e-5)
  np.testing.assert_allclose(value("model/linear/kernel").ravel(), kernel,
                             rtol=1e-5)


@pytest.mark.parametrize("parts,rule", [("tables", "adascale"),
                                        ("embeddings,dense", "sqrt")])
def test_bad_parts_are_refused(parts, rule):
  with pytest.raises(errors.ConfigError, match="adascale_parts="):
    es.TrainingConfig(lr_scaling=rule, adascale_parts=parts)


def test_a_model_without_tables_is_refused(tmp_path):
  x = np.ones((4, 2), np.float32)
  with pytest.raises(errors.ConfigError, match="needs embedding tables"):
    trainer.train(tiny_models.SumLinear(2, True), {"x": x}, np.zeros(4),
                  tmp_path, 4, 1, optimizer="sgd", lr_scaling="adascale",
                  accumulation_steps=2, adascale_parts="embeddings,dense")

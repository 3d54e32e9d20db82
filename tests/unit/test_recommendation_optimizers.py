"""Adagrad and FTRL: sparse updates against hand computations, and in training.

An embedding's gradient reaches the optimizer as IndexedSlices. The rows not
looked up must keep their weights and their slots: FTRL with L2 shrinkage is
the case that shows it, since a dense zero gradient would still shrink them.
"""
import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale.train_ops import optimizers
from tests.workers import tiny_models

TABLE = np.arange(12, dtype=np.float32).reshape(6, 2) / 4.0 - 1.0
# Two updates; row 4 is looked up twice in each, rows 0, 2, 3 and 5 never.
STEPS = [
    (np.array([1, 4, 4]), np.array([[0.5, -0.2], [0.1, 0.3], [0.2, -0.4]])),
    (np.array([4, 1, 4]), np.array([[-0.3, 0.1], [0.6, 0.2], [0.05, 0.0]])),
]
UNTOUCHED = [0, 2, 3, 5]
LR = 0.3
FTRL = dict(learning_rate_power=-0.5, initial_accumulator_value=0.1, l1=0.05,
            l2=0.1, l2_shrinkage=0.2, beta=0.5)


def _dense(indices, values):
  grad = np.zeros_like(TABLE, dtype=np.float64)
  np.add.at(grad, indices, values)
  return grad


def adagrad_numpy(initial_accumulator_value):
  """accum += g^2; w -= lr g / sqrt(accum), on the rows looked up only."""
  weights = TABLE.astype(np.float64)
  accum = np.full_like(weights, initial_accumulator_value)
  for indices, values in STEPS:
    rows = np.unique(indices)
    g = _dense(indices, values)[rows]
    accum[rows] += g * g
    weights[rows] -= LR * g / np.sqrt(accum[rows])
  return {"table": weights, "accumulator": accum}


def ftrl_numpy(learning_rate_power, initial_accumulator_value, l1, l2,
               l2_shrinkage, beta):
  """FTRL-Proximal as McMahan et al. write it, with shrinkage and beta."""
  weights = TABLE.astype(np.float64)
  accum = np.full_like(weights, initial_accumulator_value)
  linear = np.zeros_like(weights)
  power = -learning_rate_power
  for indices, values in STEPS:
    rows = np.unique(indices)
    g = _dense(indices, values)[rows]
    w = weights[rows]
    new_accum = accum[rows] + g * g
    sigma = (new_accum ** power - accum[rows] ** power) / LR
    linear[rows] += g + 2.0 * l2_shrinkage * w - sigma * w
    quadratic = (new_accum ** power + beta) / LR + 2.0 * l2
    z = linear[rows]
    weights[rows] = np.where(np.abs(z) > l1,
                             (np.sign(z) * l1 - z) / quadratic, 0.0)
    accum[rows] = new_accum
  return {"table": weights, "accumulator": accum, "linear": linear}


def _apply(name, options, sparse, use_resource):
  """Runs `make_optimizer(name)` over STEPS; the table and its slots."""
  with tf.Graph().as_default():
    table = tf.compat.v1.get_variable("table", initializer=TABLE,
                                      use_resource=use_resource)
    indices = tf.compat.v1.placeholder(tf.int64, [None])
    values = tf.compat.v1.placeholder(tf.float32, [None, 2])
    if sparse:
      grad = tf.IndexedSlices(values, indices, tf.constant(TABLE.shape))
    else:
      grad = tf.math.unsorted_segment_sum(values, indices, TABLE.shape[0])
    optimizer = optimizers.make_optimizer(name, LR, **options)
    step = optimizer.apply_gradients([(grad, table)])
    slots = {slot: optimizer.get_slot(table, name) for slot, name in {
        "adagrad": {"accumulator": "accumulator"},
        "ftrl": {"accumulator": "accum", "linear": "linear"}}[name].items()}
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      for step_indices, step_values in STEPS:
        sess.run(step, {indices: step_indices, values: step_values})
      return sess.run(dict(slots, table=table))


@pytest.mark.parametrize("use_resource", [True, False])
@pytest.mark.parametrize("name,options,reference", [
    ("adagrad", dict(initial_accumulator_value=0.2), adagrad_numpy),
    ("ftrl", FTRL, ftrl_numpy),
    ("ftrl", dict(FTRL, l1=0.0, l2_shrinkage=0.0, beta=0.0), ftrl_numpy),
], ids=["adagrad", "ftrl_l1_l2_shrinkage_beta", "ftrl_plain"])
def test_sparse_update_matches_hand_computation(name, options, reference,
                                                use_resource):
  got = _apply(name, options, sparse=True, use_resource=use_resource)
  want = reference(**options)
  for key, value in want.items():
    np.testing.assert_allclose(got[key], value, rtol=1e-5, atol=1e-6,
                               err_msg=f"{name} {key}")
  initial_accumulator = options["initial_accumulator_value"]
  np.testing.assert_array_equal(got["table"][UNTOUCHED], TABLE[UNTOUCHED])
  np.testing.assert_array_equal(got["accumulator"][UNTOUCHED],
                                np.float32(initial_accumulator))
  if "linear" in got:
    np.testing.assert_array_equal(got["linear"][UNTOUCHED], 0.0)
  assert np.max(np.abs(got["table"][[1, 4]] - TABLE[[1, 4]])) > 1e-2


def test_the_same_gradient_dense_would_shrink_every_row():
  """What the sparse test guards against: a dense FTRL update with shrinkage
  changes rows the batch never looked up."""
  got = _apply("ftrl", FTRL, sparse=False, use_resource=True)
  assert np.max(np.abs(got["table"][UNTOUCHED] - TABLE[UNTOUCHED])) > 1e-2


@pytest.mark.parametrize("name,options", [
    ("adagrad", ()),
    ("ftrl", (("l2_shrinkage", 0.1), ("l1", 0.001))),
])
def test_training_updates_only_the_rows_looked_up(name, options, tmp_path):
  """Through the framework's pipeline, with accumulation, the embedding's
  gradient stays sparse up to the optimizer."""
  model, features, labels = tiny_models.generated_data("embedding", 64)
  features["tokens"] %= 10  # rows 10..19 of the 20-row table are never used
  training = es.TrainingConfig(
      optimizer=name, learning_rate=0.5,
      accumulation_steps=2, optimizer_options=options)
  estimator = es.make_estimator(model, model_dir=str(tmp_path),
                                training_config=training, random_seed=0)
  train = es.inputs.from_arrays(features, labels, 16, seed=0,
                                accumulation_steps=2)
  evaluate = es.inputs.from_arrays(features, labels, 64, training=False)
  estimator.train(train, max_steps=1)
  first = estimator.get_variable_value("model/table")
  before = estimator.evaluate(evaluate)["loss"]
  estimator.train(train, max_steps=30)
  table = estimator.get_variable_value("model/table")
  slot = "model/table/" + ("Adagrad" if name == "adagrad" else "Ftrl")
  np.testing.assert_array_equal(table[10:], first[10:])
  np.testing.assert_array_equal(estimator.get_variable_value(slot)[10:],
                                np.float32(0.1))
  assert np.max(np.abs(table[:10] - first[:10])) > 1e-2
  assert estimator.evaluate(evaluate)["loss"] < before - 0.01


@pytest.mark.parametrize("name,options,message", [
    ("adagrad", dict(initial_accumulator_value=0.0),
     "initial_accumulator_value must be > 0"),
    ("ftrl", dict(learning_rate_power=0.5), "learning_rate_power must be <= 0"),
    ("ftrl", dict(l1=-1.0), "l1 must be >= 0"),
    ("ftrl", dict(l2_shrinkage=-0.1), "l2_shrinkage must be >= 0"),
])
def test_bad_options_are_named(name, options, message):
  with pytest.raises(es.errors.ConfigError,
                     match=f"optimizer='{name}': option {message}"):
    optimizers.make_optimizer(name, 0.1, **options)


def test_ftrl_options_are_listed_in_the_users_words():
  assert optimizers.valid_options("ftrl") == (
      "learning_rate_power", "initial_accumulator_value", "l1", "l2",
      "l2_shrinkage", "beta")
  assert optimizers.valid_options("adagrad") == ("initial_accumulator_value",)

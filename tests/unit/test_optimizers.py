"""LARS and LAMB against updates written out in numpy, and inside the Estimator.

The model is one kernel and one bias, so the default exclusion (biases get
neither weight decay nor a trust ratio) is exercised at every step.
"""
import inspect

import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale.train_ops import optimizers
from tests.workers import tiny_models

KERNEL = np.array([[1.0, -2.0], [0.5, 2.0]])
BIAS = np.array([0.5, -1.0])
# Three steps of gradients, different in size and direction.
GRADS = [
    {"kernel": np.array([[0.3, -0.1], [0.2, 0.4]]),
     "bias": np.array([0.1, -0.2])},
    {"kernel": np.array([[-0.5, 0.2], [0.1, 0.0]]),
     "bias": np.array([0.3, 0.05])},
    {"kernel": np.array([[0.05, 0.6], [-0.3, 0.2]]),
     "bias": np.array([-0.4, 0.1])},
]
LARS = dict(momentum=0.9, weight_decay=0.1, trust_coefficient=0.5)
LAMB = dict(beta1=0.9, beta2=0.99, epsilon=1e-6, weight_decay=0.1)
LR = 0.1


def _ratio_or_one(w_norm, other_norm, ratio):
  return ratio if w_norm > 0 and other_norm > 0 else 1.0


def lars_numpy(weights, adapts, momentum, weight_decay, trust_coefficient):
  """LARS by hand: v = m v + lr ratio (g + wd w), w -= v.

  Excluded variables: v = m v + lr g.
  """
  weights = {k: v.copy() for k, v in weights.items()}
  velocity = {k: np.zeros_like(v) for k, v in weights.items()}
  for grads in GRADS:
    for name, g in grads.items():
      w = weights[name]
      if adapts[name]:
        w_norm, g_norm = np.linalg.norm(w), np.linalg.norm(g)
        ratio = _ratio_or_one(w_norm, g_norm, trust_coefficient * w_norm /
                              (g_norm + weight_decay * w_norm))
        step = LR * ratio * (g + weight_decay * w)
      else:
        step = LR * g
      velocity[name] = momentum * velocity[name] + step
      weights[name] = w - velocity[name]
  return weights


def lamb_numpy(weights, adapts, beta1, beta2, epsilon, weight_decay):
  """LAMB by hand: bias-corrected Adam direction + wd w, times ||w||/||u||."""
  weights = {k: v.copy() for k, v in weights.items()}
  first = {k: np.zeros_like(v) for k, v in weights.items()}
  second = {k: np.zeros_like(v) for k, v in weights.items()}
  for t, grads in enumerate(GRADS, start=1):
    for name, g in grads.items():
      w = weights[name]
      first[name] = beta1 * first[name] + (1 - beta1) * g
      second[name] = beta2 * second[name] + (1 - beta2) * g * g
      update = (first[name] / (1 - beta1**t)) / (
          np.sqrt(second[name] / (1 - beta2**t)) + epsilon)
      if adapts[name]:
        update = update + weight_decay * w
        w_norm, u_norm = np.linalg.norm(w), np.linalg.norm(update)
        update = update * _ratio_or_one(w_norm, u_norm, w_norm / u_norm)
      weights[name] = w - LR * update
  return weights


def _apply_in_tf(name, options, initial, use_resource):
  """Runs `make_optimizer(name)` over GRADS on dense/kernel and dense/bias."""
  with tf.Graph().as_default():
    variables = {k: tf.compat.v1.get_variable(
        f"dense/{k}", initializer=tf.constant(v, tf.float32),
        use_resource=use_resource) for k, v in initial.items()}
    feeds = {k: tf.compat.v1.placeholder(tf.float32, v.shape)
             for k, v in initial.items()}
    optimizer = optimizers.make_optimizer(name, LR, **options)
    step = optimizer.apply_gradients([(feeds[k], variables[k])
                                      for k in sorted(variables)])
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      for grads in GRADS:
        sess.run(step, {feeds[k]: grads[k] for k in feeds})
      return sess.run(variables)


# (exclude option, which variables adapt, initial kernel): the default
# exclusion, a configured one, none at all, and a zero kernel (ratio 1).
CASES = [
    (None, {"kernel": True, "bias": False}, KERNEL),
    (("kernel",), {"kernel": False, "bias": True}, KERNEL),
    ((), {"kernel": True, "bias": True}, KERNEL),
    (None, {"kernel": True, "bias": False}, np.zeros((2, 2))),
]


@pytest.mark.parametrize("use_resource", [True, False])
@pytest.mark.parametrize("exclude,adapts,kernel", CASES)
@pytest.mark.parametrize("name,options,reference", [
    ("lars", LARS, lars_numpy), ("lamb", LAMB, lamb_numpy)])
def test_matches_numpy(name, options, reference, exclude, adapts, kernel,
                       use_resource):
  initial = {"kernel": kernel, "bias": BIAS}
  got = _apply_in_tf(name, dict(options, exclude=exclude), initial,
                     use_resource)
  want = reference(initial, adapts, **options)
  for key in initial:
    np.testing.assert_allclose(got[key], want[key], rtol=2e-5, atol=1e-6,
                               err_msg=f"{name} {key} exclude={exclude}")
  # The update must differ from the same optimizer without any adaptation,
  # or this test would not see the trust ratio at all.
  plain = reference(initial, {"kernel": False, "bias": False}, **options)
  adapted = [k for k in initial if adapts[k]]
  assert any(np.max(np.abs(want[k] - plain[k])) > 1e-3 for k in adapted)


@pytest.mark.parametrize("use_resource", [True, False])
@pytest.mark.parametrize("name", ["lars", "lamb"])
def test_sparse_gradients_match_their_dense_equal(name, use_resource):
  """IndexedSlices (with a repeated row) update as the dense gradient does."""
  table = np.arange(8, dtype=np.float32).reshape(4, 2) / 4.0
  values = np.array([[0.5, -0.2], [0.1, 0.3], [0.2, 0.2]], np.float32)
  indices = np.array([2, 0, 2])
  dense = np.zeros_like(table)
  np.add.at(dense, indices, values)
  results = []
  for sparse in (True, False):
    with tf.Graph().as_default():
      var = tf.compat.v1.get_variable("table", initializer=table,
                                      use_resource=use_resource)
      grad = (tf.IndexedSlices(tf.constant(values), tf.constant(indices),
                               tf.constant([4, 2])) if sparse
              else tf.constant(dense))
      options = dict(trust_coefficient=0.1) if name == "lars" else {}
      optimizer = optimizers.make_optimizer(name, 0.5, **options)
      step = optimizer.apply_gradients([(grad, var)])
      with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        sess.run(step)
        sess.run(step)
        results.append(sess.run(var))
  np.testing.assert_allclose(results[0], results[1], rtol=1e-6, atol=1e-7)
  assert np.max(np.abs(results[0] - table)) > 1e-3


@pytest.mark.parametrize("name", ["lars", "lamb"])
@pytest.mark.parametrize("case", ["mlp", "embedding"])
def test_trains_with_accumulation_and_adascale(name, case, tmp_path):
  # Rates at which one update moves a layer by about 1-2 % of its norm:
  # at three times LARS's, whether the loss falls within 40 updates depends
  # on the initial weights and the order of the examples.
  options = (("trust_coefficient", 0.01),) if name == "lars" else ()
  training = es.TrainingConfig(
      optimizer=name, learning_rate=1.0 if name == "lars" else 0.02,
      accumulation_steps=2, lr_scaling="adascale", optimizer_options=options)
  model, features, labels = tiny_models.generated_data(case, 64)
  estimator = es.make_estimator(model, model_dir=str(tmp_path),
                                training_config=training, random_seed=0)
  train = es.inputs.from_arrays(features, labels, 16, seed=0,
                                accumulation_steps=2)
  evaluate = es.inputs.from_arrays(features, labels, 64, training=False)
  estimator.train(train, max_steps=1)
  before = estimator.evaluate(evaluate)["loss"]
  estimator.train(train, max_steps=40)
  after = estimator.evaluate(evaluate)["loss"]
  assert estimator.get_variable_value("global_step") == 40
  assert 1.0 <= estimator.get_variable_value("adascale/gain") <= 2.0
  assert np.isfinite(after) and after < before - 0.05, (before, after)


@pytest.mark.parametrize("name,options,message", [
    ("lars", dict(trust_coefficient=0.0), "trust_coefficient must be > 0"),
    ("lars", dict(momentum=1.0), r"momentum must be in \[0, 1\)"),
    ("lamb", dict(weight_decay=-0.1), "weight_decay must be >= 0"),
    ("lamb", dict(epsilon=0.0), "epsilon must be > 0"),
    ("lamb", dict(exclude="bias"), "exclude must be a sequence of regexes"),
    ("lars", dict(exclude=("bias", "(")), r"'\(', which is not a valid regex"),
])
def test_bad_options_are_named(name, options, message):
  with pytest.raises(es.errors.ConfigError,
                     match=f"optimizer='{name}': option .*{message}"):
    optimizers.make_optimizer(name, 0.1, **options)


def test_valid_options_are_the_factorys_arguments():
  assert optimizers.valid_options("sgd") == ()
  assert optimizers.valid_options("momentum") == ("momentum", "nesterov")
  assert "trust_coefficient" in optimizers.valid_options("lars")
  assert "trust_coefficient" not in optimizers.valid_options("lamb")


@pytest.mark.parametrize("name", sorted(optimizers.OPTIMIZERS))
def test_every_valid_option_builds_the_optimizer(name):
  """Each listed option is accepted with its own default value."""
  factory = optimizers.OPTIMIZERS[name]
  defaults = {option: parameter.default for option, parameter in
              inspect.signature(factory).parameters.items()
              if option in optimizers.valid_options(name)}
  optimizers.check_options(name, defaults)
  with tf.Graph().as_default():
    assert optimizers.make_optimizer(name, 0.1, **defaults) is not None


@pytest.mark.parametrize("name,options,message", [
    ("momentum", (("momentun", 0.9),), r"'momentun' is not an option of "
     r"optimizer='momentum' \(did you mean 'momentum'\?\); valid: momentum, "
     r"nesterov$"),
    ("lamb", {"trust_coefficient": 0.1}, r"'trust_coefficient' is not an "
     r"option of optimizer='lamb'; valid: beta1, beta2, epsilon, "
     r"weight_decay, exclude$"),
    ("sgd", {"momentum": 0.9}, r"'momentum' is not an option of "
     r"optimizer='sgd'; valid: none$"),
])
def test_unknown_options_are_named_with_the_valid_ones(name, options,
                                                        message):
  with pytest.raises(es.errors.ConfigError, match=message):
    optimizers.check_options(name, options)
  with pytest.raises(es.errors.ConfigError, match=message):
    optimizers.make_optimizer(name, 0.1, **dict(options))


def test_options_that_are_not_pairs_are_refused():
  # (("momentum", 0.9)) without its trailing comma is the pair itself.
  with pytest.raises(es.errors.ConfigError, match=r"optimizer_options="
                     r"\('momentum', 0\.9\) must be \(name, value\) pairs"):
    optimizers.check_options("momentum", ("momentum", 0.9))


def test_training_config_refuses_an_unknown_option_when_made():
  with pytest.raises(es.errors.ConfigError, match="'momentun'"):
    es.TrainingConfig(optimizer_options=(("momentun", 0.9),))
  config = es.TrainingConfig(optimizer="lars", optimizer_options=(
      ("momentum", 0.8), ("trust_coefficient", 0.01)))
  assert dict(config.optimizer_options)["trust_coefficient"] == 0.01


def _sparse_steps(name, steps):
  """A 5 x 2 table after each step of sparse gradients (ids, rows)."""
  with tf.Graph().as_default():
    table = tf.compat.v1.get_variable(
        "table", initializer=np.arange(10.0, dtype=np.float32).reshape(5, 2))
    ids = tf.compat.v1.placeholder(tf.int64, [None])
    rows = tf.compat.v1.placeholder(tf.float32, [None, 2])
    grad = tf.IndexedSlices(rows, ids, tf.constant([5, 2], tf.int64))
    update = optimizers.make_optimizer(name, 0.1).apply_gradients(
        [(grad, table)])
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      seen = []
      for step_ids, step_rows in steps:
        sess.run(update, {ids: step_ids, rows: step_rows})
        seen.append(sess.run(table))
      return seen


def test_lazy_adam_moves_only_the_rows_looked_up_by_adams_rule():
  # Id 3 twice in the first update: its rows are summed, as Adam's.
  steps = [([1, 3, 3], [[1.0, -2.0], [0.5, 0.5], [0.5, 1.5]]),
           ([3, 4], [[-1.0, 3.0], [2.0, 0.25]])]
  lazy = _sparse_steps("lazy_adam", steps)
  expected = np.arange(10.0).reshape(5, 2)
  m, v = np.zeros((5, 2)), np.zeros((5, 2))
  for t, (step_ids, step_rows) in enumerate(steps, 1):
    grad = np.zeros((5, 2))
    np.add.at(grad, step_ids, step_rows)
    for i in sorted(set(step_ids)):
      m[i] = 0.9 * m[i] + 0.1 * grad[i]
      v[i] = 0.999 * v[i] + 0.001 * grad[i] ** 2
      rate = 0.1 * np.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
      expected[i] -= rate * m[i] / (np.sqrt(v[i]) + 1e-8)
    np.testing.assert_allclose(lazy[t - 1], expected, rtol=1e-5)
  # Row 1, not looked up in the second update, stays; Adam's moves on.
  np.testing.assert_array_equal(lazy[1][1], lazy[0][1])
  adam = _sparse_steps("adam", steps)
  assert np.abs(adam[1][1] - adam[0][1]).max() > 1e-3

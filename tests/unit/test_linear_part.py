"""A model's linear part trains with its own optimizer: FTRL for the wide
part, Adagrad for the deep one learns where FTRL everywhere cannot, and
FTRL meeting a hidden layer is said once."""
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.distribute import values as distribute_values  # pylint: disable=g-direct-tensorflow-import

import estimator_scale as es
from estimator_scale.embeddings import partitioning
from estimator_scale.train_ops import parts

IDS = 10


def _arrays():
  """XOR of the signs of x (the deep part's to learn), except ids 0 and 1,
  always clicked (the linear part's)."""
  rng = np.random.RandomState(0)
  x = rng.uniform(-1, 1, (256, 2)).astype(np.float32)
  ids = rng.randint(0, IDS, (256, 1))
  labels = ((x[:, 0] * x[:, 1] > 0) | (ids[:, 0] < 2)).astype(np.float32)
  return x, ids, labels


def _data():
  x, ids, labels = _arrays()
  return {"x": tf.constant(x), "id": tf.constant(ids)}, tf.constant(labels)


def _ids_alone_loss():
  """The least log loss of a model of the ids alone (the linear part)."""
  _, ids, labels = _arrays()
  loss = 0.0
  for i in range(IDS):
    p = labels[ids[:, 0] == i].mean()
    if 0 < p < 1:
      loss -= (ids[:, 0] == i).mean() * (p * np.log(p) +
                                         (1 - p) * np.log(1 - p))
  return loss


def _loss(features, labels):
  with es.linear_part():
    wide = tf.compat.v1.get_variable(
        "wide", [IDS, 1], initializer=tf.compat.v1.zeros_initializer())
    wide_logit = tf.reduce_sum(tf.nn.embedding_lookup(wide, features["id"]),
                               1)
  hidden = features["x"]
  for i in range(2):
    hidden = tf.compat.v1.layers.dense(
        hidden, 16, tf.nn.relu, name=f"hidden{i}",
        kernel_initializer=tf.compat.v1.glorot_uniform_initializer(seed=i))
  logits = tf.compat.v1.layers.dense(hidden, 1, name="out") + wide_logit
  return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
      labels=labels, logits=logits[:, 0]))


def _train(optimizer, linear_optimizer=None, steps=300):
  """(the loss of the last update, the wide weights, every variable's
  name)."""
  config = es.TrainingConfig(optimizer=optimizer,
                             linear_optimizer=linear_optimizer,
                             learning_rate=0.1)
  with tf.Graph().as_default():
    features, labels = _data()
    built = es.build_train_op(_loss, features, labels, config)
    wide = [v for v in tf.compat.v1.global_variables()
            if v.op.name == "wide"][0]
    names = [v.op.name for v in tf.compat.v1.global_variables()]
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      for _ in range(steps):
        _, loss = sess.run([built.train_op, built.loss])
      return loss, sess.run(wide)[:, 0], names


def test_ftrl_for_the_linear_part_and_adagrad_for_the_deep_part_learn():
  with mock.patch.object(parts.logging, "warning") as warning:
    loss, wide, names = _train("adagrad", linear_optimizer="ftrl")
  assert loss < 0.5 * _ids_alone_loss()  # the deep part learned
  assert wide[:2].min() > 0.5 and np.abs(wide[2:]).max() < wide[:2].min()
  # Each part's slots are its own optimizer's.
  assert {"wide/Ftrl", "wide/Ftrl_1"} <= set(names)
  assert "hidden0/kernel/Adagrad" in names
  assert not any(n.startswith("hidden0") and "Ftrl" in n for n in names)
  assert not any(n.startswith("wide") and "Adagrad" in n for n in names)
  warning.assert_not_called()


def test_ftrl_on_a_hidden_layer_never_learns_and_is_said_once():
  parts._WARNED.clear()  # pylint: disable=protected-access
  with mock.patch.object(parts.logging, "warning") as warning:
    loss, _, _ = _train("ftrl")
    _train("ftrl", steps=1)  # a second graph of the same model
  assert loss > _ids_alone_loss() - 0.01  # the deep part learned nothing
  warning.assert_called_once()
  assert warning.call_args[0][1] == "hidden0/kernel"
  assert "a hidden layer's weights" in warning.call_args[0][0]


def test_ftrl_on_a_linear_model_is_not_warned_of():
  def linear(features, labels):
    logits = tf.compat.v1.layers.dense(features["x"], 1, name="logit")
    return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
        labels=labels, logits=logits[:, 0]))

  parts._WARNED.clear()  # pylint: disable=protected-access
  with mock.patch.object(parts.logging, "warning") as warning, \
      tf.Graph().as_default():
    features, labels = _data()
    es.build_train_op(linear, features, labels,
                      es.TrainingConfig(optimizer="ftrl"))
  warning.assert_not_called()


def test_the_parts_of_a_split_table_are_the_linear_part_s():
  with tf.Graph().as_default():
    with partitioning.partitioned_variables(2, min_slice_bytes=100):
      with es.linear_part():
        table = tf.compat.v1.get_variable("table", [100, 4])
      other = tf.compat.v1.get_variable("other", [3])
    assert len(list(table)) == 2
    assert all(parts.is_linear(part) for part in table)
    assert not parts.is_linear(other)


def test_each_replica_of_a_mirrored_variable_is_the_linear_part_s():
  """Under tf.distribute each replica's update gets its own variable."""
  replicas = []

  def mirror(next_creator, **kwargs):  # as MirroredStrategy makes them
    replicas.extend(next_creator(**dict(kwargs, name=kwargs["name"] + suffix))
                    for suffix in ("", "/replica_1"))
    return distribute_values.Mirrored(replicas)

  with tf.Graph().as_default():
    with tf.compat.v1.variable_creator_scope(mirror), es.linear_part():
      tf.Variable(1.0, name="w")
    other = tf.Variable(1.0, name="other")
    assert [parts.is_linear(v) for v in replicas + [other]] == [
        True, True, False]


def test_a_linear_optimizer_needs_a_linear_part():
  config = es.TrainingConfig(optimizer="adagrad", linear_optimizer="ftrl")

  def deep_only(features, labels):
    del labels
    return tf.reduce_mean(tf.compat.v1.layers.dense(features["x"], 1))

  with tf.Graph().as_default(), pytest.raises(
      es.errors.ConfigError, match=r"linear_optimizer='ftrl', but the model "
      r"builds no variable inside estimator_scale.linear_part\(\)"):
    es.build_train_op(deep_only, *_data(), config)


@pytest.mark.parametrize("kwargs,message", [
    (dict(linear_optimizer="rmsprop"), r"optimizer='rmsprop' is unknown"),
    (dict(linear_optimizer="ftrl", linear_optimizer_options=(("beta1", 0.9),)),
     r"'beta1' is not an option of optimizer='ftrl'"),
    (dict(linear_optimizer_options=(("l1", 0.1),)),
     r"linear_optimizer_options=\(\('l1', 0.1\),\) needs a linear_optimizer"),
])
def test_bad_linear_optimizers_are_named(kwargs, message):
  with pytest.raises(es.errors.ConfigError, match=message):
    es.TrainingConfig(optimizer="adagrad", **kwargs)

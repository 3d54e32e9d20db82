"""Every initializer kind a TF 2 user writes draws its part of a table:
v1, TF 2 and Keras ones, functions; in a shard or part, where
get_variable splits a variable, and as rows drawn for a growing table."""
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.ops import init_ops_v2  # pylint: disable=g-direct-tensorflow-import

import estimator_scale as es
from estimator_scale.embeddings import initializers
from estimator_scale.embeddings import partitioning
from tests.workers.sharded_equivalence import row_initializer

SHAPE = [40, 3]
PARTS = [(0, 14), (14, 13), (27, 13)]  # (first row, rows)
TABLE = np.arange(120, dtype=np.float32).reshape(SHAPE) / 7


def _plain_rows(shape, dtype=None):
  """A per-row function that knows nothing of parts."""
  rows = tf.cast(tf.range(shape[0]), dtype or tf.float32)
  return tf.tile(rows[:, None], [1, shape[1]]) * 0.5


# Deterministic per row: the parts together are the whole table.
DETERMINISTIC = {
    "v2 zeros": tf.zeros_initializer(),
    "v2 ones": tf.ones_initializer(),
    "v2 constant": tf.constant_initializer(0.25),
    "v2 constant table": tf.constant_initializer(TABLE),
    "v2 constant list": tf.constant_initializer(TABLE.ravel().tolist()),
    "v2 identity": init_ops_v2.Identity(),
    "v2 orthogonal seeded": init_ops_v2.Orthogonal(seed=2),
    "keras orthogonal seeded": tf.keras.initializers.Orthogonal(seed=2),
    "keras zeros": tf.keras.initializers.Zeros(),
    "keras ones": tf.keras.initializers.Ones(),
    "keras constant": tf.keras.initializers.Constant(-1.5),
    "keras constant table": tf.keras.initializers.Constant(TABLE),
    "keras identity": tf.keras.initializers.Identity(),
    "v1 zeros": tf.compat.v1.zeros_initializer(),
    "v1 constant": tf.compat.v1.constant_initializer(3.0),
    "v1 constant table": tf.compat.v1.constant_initializer(TABLE),
    "v1 identity": tf.compat.v1.initializers.identity(),
    "partition_info function": row_initializer,
    "plain function": _plain_rows,
}

# Random: each part its own values, the same in every run when seeded.
RANDOM = {
    "v2 normal": tf.random_normal_initializer(seed=1),
    "v2 uniform": tf.random_uniform_initializer(-1.0, 1.0, seed=1),
    "v2 truncated": init_ops_v2.TruncatedNormal(seed=1),
    "v2 glorot": init_ops_v2.GlorotUniform(seed=1),
    "v2 variance scaling": init_ops_v2.VarianceScaling(
        2.0, "fan_in", "truncated_normal", seed=1),
    "keras normal": tf.keras.initializers.RandomNormal(seed=1),
    "keras uniform": tf.keras.initializers.RandomUniform(seed=1),
    "keras truncated": tf.keras.initializers.TruncatedNormal(seed=1),
    "keras he": tf.keras.initializers.HeNormal(seed=1),
    "keras lecun": tf.keras.initializers.LecunUniform(seed=1),
    "v1 normal": tf.compat.v1.random_normal_initializer(seed=1),
    "v1 uniform": tf.compat.v1.random_uniform_initializer(seed=1),
    "v1 glorot": tf.compat.v1.glorot_uniform_initializer(seed=1),
}


def _draw(tensors):
  with tf.compat.v1.Session() as sess:
    return sess.run(tensors)


def _parts(initializer, shape=SHAPE, parts=PARTS):
  """The parts as `part_initializer` draws them, in a graph of their own."""
  with tf.Graph().as_default():
    return _draw([initializers.part_initializer(initializer, shape, first)(
        [rows] + shape[1:], dtype=tf.float32) for first, rows in parts])


@pytest.mark.parametrize("name", sorted(DETERMINISTIC))
def test_a_deterministic_initializer_gives_each_part_its_rows(name):
  initializer = DETERMINISTIC[name]
  with tf.Graph().as_default():
    whole = _draw(initializer(SHAPE, dtype=tf.float32))
  parts = _parts(initializer)
  assert [p.shape for p in parts] == [(rows, 3) for _, rows in PARTS]
  np.testing.assert_allclose(np.concatenate(parts), whole, rtol=0, atol=1e-6)
  assert np.ptp(whole) > 0 or name.endswith(("zeros", "ones", "constant"))


@pytest.mark.parametrize("name", sorted(RANDOM))
def test_a_random_initializer_draws_each_part_its_own_values(name):
  """No part repeats another, and a seeded one draws the same part again
  (every rank of a job, every run)."""
  parts = _parts(RANDOM[name])
  again = _parts(RANDOM[name])
  for first, second in zip(parts, again):
    np.testing.assert_array_equal(first, second)
  for i in range(len(parts)):
    for j in range(i):
      assert not np.allclose(parts[i][:13], parts[j][:13]), (i, j)
  table = np.concatenate(parts)
  assert table.std() > 0.01 and np.all(np.isfinite(table))


@pytest.mark.parametrize("initializer", [
    tf.compat.v1.glorot_uniform_initializer(seed=1),
    init_ops_v2.GlorotUniform(seed=1),
    tf.keras.initializers.GlorotUniform(seed=1)])
def test_a_part_draws_with_the_whole_tables_fans(initializer):
  """Glorot's bound is the whole table's (1000 x 4), not the part's: the
  part's (10 x 4) would allow 0.65, the table's 0.077."""
  (values,) = _parts(initializer, [1000, 4], [(500, 10)])
  assert values.shape == (10, 4)
  assert np.abs(values).max() <= np.sqrt(6 / 1004) + 1e-6
  assert np.abs(values).max() > 0.5 * np.sqrt(6 / 1004)


@pytest.mark.parametrize("name", ["v2 normal", "v2 constant table",
                                  "v2 zeros", "keras he", "v1 glorot",
                                  "partition_info function"])
def test_get_variable_and_keras_split_any_initializer(name):
  """Where get_variable splits a variable itself (a scope's partitioner)
  and where a variable creator splits a Keras layer's."""
  initializer = {**DETERMINISTIC, **RANDOM}[name]
  with tf.Graph().as_default():
    with partitioning.partitioned_variables(3, min_slice_bytes=100):
      table = tf.compat.v1.get_variable("table", SHAPE,
                                        initializer=initializer)
      layer = tf.keras.layers.Embedding(
          SHAPE[0], SHAPE[1], embeddings_initializer=initializer)
      layer(tf.constant([0]))
    assert len(list(table)) == 3 and len(layer.weights) == 3
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      made = [np.concatenate(sess.run(list(table))),
              np.concatenate(sess.run(layer.weights))]
  if name in DETERMINISTIC:
    with tf.Graph().as_default():
      whole = _draw(initializer(SHAPE, dtype=tf.float32))
    for values in made:
      np.testing.assert_allclose(values, whole, atol=1e-6)
  else:
    for values in made:
      parts = np.split(values, [14, 27])
      assert not np.allclose(parts[1][:13], parts[2][:13])


@pytest.mark.parametrize("name", ["v2 normal", "keras he", "v1 glorot",
                                  "v2 constant", "v2 zeros",
                                  "keras constant table", "plain function"])
def test_rows_are_drawn_for_a_count_known_when_the_graph_runs(name):
  initializer = {**DETERMINISTIC, **RANDOM}[name]
  with tf.Graph().as_default():
    count = tf.compat.v1.placeholder(tf.int32, [])
    rows = initializers.draw_rows(initializer, count, SHAPE)
    with tf.compat.v1.Session() as sess:
      first = sess.run(rows, {count: 5})
      second = sess.run(rows, {count: 7})
  assert first.shape == (5, 3) and second.shape == (7, 3)
  if name in RANDOM:  # new rows at every draw
    assert not np.allclose(first, second[:5])
  elif name == "keras constant table":
    np.testing.assert_allclose(second, TABLE[:7])


def test_what_is_not_an_initializer_is_refused_by_name():
  with pytest.raises(es.errors.ConfigError,
                     match=r"initializer='glorot' is not an initializer"):
    initializers.part_initializer("glorot", SHAPE, 0)
  with pytest.raises(es.errors.ConfigError,
                     match=r"a constant of 4 values cannot fill a table of "
                     r"shape \[40, 3\]: give one value, or 120 values"):
    initializers.part_initializer(tf.constant_initializer([1, 2, 3, 4]),
                                  SHAPE, 0)

"""Large variables split into parts, whatever makes them; capacity checks."""
import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale import embeddings
from estimator_scale.embeddings import capacity
from estimator_scale.embeddings import partitioning


@pytest.mark.parametrize("shape,num_ps,min_slice,parts", [
    ([1000, 8], 4, 1000, 4),      # 32,000 bytes: one part per ps task
    ([1000, 8], 4, 12000, 3),     # parts no smaller than a slice
    ([1000, 8], 4, 32000, 1),     # not larger than a slice: whole
    ([1000, 8], 1, 1, 1),         # one ps task: nothing to split over
    ([3, 1000], 4, 1, 3),         # never more parts than rows
    ([], 4, 1, 1),                # scalars stay whole
])
def test_number_of_parts(shape, num_ps, min_slice, parts):
  assert partitioning.number_of_parts(shape, tf.float32, num_ps,
                                      min_slice) == parts


def test_part_rows_cover_the_rows():
  assert partitioning.part_rows(10, 4) == [3, 3, 2, 2]


def _build():
  ids = tf.constant([[1], [998]], tf.int64)
  column = tf.feature_column.embedding_column(
      tf.feature_column.categorical_column_with_identity("c", 1000), 8)
  outputs = [
      tf.compat.v1.get_variable("get_variable", [1000, 8]),
      tf.keras.layers.DenseFeatures([column], name="columns")({"c": ids}),
      tf.keras.layers.Embedding(1000, 8, name="keras")(ids),
      tf.keras.layers.Dense(3, name="small")(tf.ones([1, 8])),
  ]
  return sum(tf.reduce_sum(o) for o in outputs)


def test_every_kind_of_large_variable_is_split_and_saved_whole(tmp_path):
  with tf.Graph().as_default():
    with partitioning.partitioned_variables(4, min_slice_bytes=1000):
      loss = _build()
    train = tf.compat.v1.train.AdagradOptimizer(0.1).minimize(loss)
    names = sorted(v.op.name for v in tf.compat.v1.global_variables())
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      sess.run(train)
      path = tf.compat.v1.train.Saver().save(sess, str(tmp_path / "ckpt"))
  for table in ("get_variable", "columns/c_embedding/embedding_weights",
                "keras/embeddings"):
    assert [n for n in names if n.startswith(table + "/part_") and
            not n.endswith("Adagrad")] == [
        f"{table}/part_{i}" for i in range(4)], names
  assert "small/kernel" in names  # small variables stay whole
  shapes = dict(tf.train.list_variables(path))
  assert shapes["keras/embeddings"] == [1000, 8]
  assert shapes["keras/embeddings/Adagrad"] == [1000, 8]


def test_parts_draw_the_whole_variables_distribution():
  """Each part draws its own values (no part repeats another)."""
  with tf.Graph().as_default():
    with partitioning.partitioned_variables(4, min_slice_bytes=1000):
      layer = tf.keras.layers.Embedding(
          1000, 8, embeddings_initializer=tf.keras.initializers.RandomUniform(
              -0.05, 0.05, seed=3))
      layer(tf.constant([[0]]))
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      parts = sess.run(layer.trainable_weights)
  assert [p.shape[0] for p in parts] == [250] * 4
  table = np.concatenate(parts)
  assert np.abs(table).max() <= 0.05 and table.std() > 0.02
  assert not np.allclose(parts[0], parts[1])


def test_a_replicated_table_too_large_for_a_task_is_refused():
  with tf.Graph().as_default():
    tf.compat.v1.get_variable("table", [1 << 16, 32])
    measured = capacity.measure()
  assert measured.bytes_per_holder == {"each worker": 8 << 20}
  assert "held by each worker 8.0 MiB" in measured.line()
  with pytest.raises(es.errors.ConfigError,
                     match=r"each worker of distribution=horovod holds all of "
                     r"them, 8.0 MiB .*the largest, table, is 8.0 MiB.* "
                     r"distribution=parameter_server splits"):
    capacity.check(measured, "horovod", 4 << 20)
  capacity.check(measured, "horovod", 16 << 20)


@pytest.mark.parametrize("raw", ["0", "-5", "lots"])
def test_bad_memory_and_slice_settings_are_named(raw):
  with pytest.raises(es.errors.ConfigError,
                     match=f"{capacity.TASK_MEMORY}='{raw}' must be"):
    capacity.task_memory({capacity.TASK_MEMORY: raw})
  with pytest.raises(es.errors.ConfigError,
                     match=f"{embeddings.MIN_SLICE}='{raw}' must be"):
    embeddings.min_slice_bytes({embeddings.MIN_SLICE: raw})

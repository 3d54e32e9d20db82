"""Large variables split into parts, whatever makes them; capacity checks."""
import types

import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale import embeddings
from estimator_scale import environment
from estimator_scale.embeddings import capacity
from estimator_scale.embeddings import partitioning
from estimator_scale.embeddings import saving
from estimator_scale.train_ops import optimizers


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


@pytest.mark.parametrize("num_ps,max_part,parts", [
    (4, 8000, 4),    # 32,000 bytes: one part of 8,000 per task
    (4, 2000, 16),   # four parts of 2,000 per task
    (2, 3000, 12),   # six parts per task: 2,667 bytes each
])
def test_parts_are_no_larger_than_max_part_bytes(num_ps, max_part, parts):
  assert partitioning.number_of_parts([1000, 8], tf.float32, num_ps, 1000,
                                      max_part) == parts


def test_a_variable_within_a_slice_stays_whole_above_max_part_bytes():
  # 32,000 bytes, a slice of 32,000: whole, though a part may be 8,000.
  assert partitioning.number_of_parts([1000, 8], tf.float32, 4, 32000,
                                      8000) == 1


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
                     match=f"{environment.TASK_MEMORY}='{raw}' must be"):
    capacity.task_memory({environment.TASK_MEMORY: raw})
  with pytest.raises(es.errors.ConfigError,
                     match=f"{environment.MIN_SLICE}='{raw}' must be"):
    embeddings.min_slice_bytes({environment.MIN_SLICE: raw})


@pytest.mark.parametrize("optimizer,slot", [("adagrad", "Adagrad"),
                                            ("ftrl", "Ftrl")])
def test_one_valued_initial_values_are_made_without_graph_constants(
    optimizer, slot):
  """Adagrad's and FTRL's accumulators (constant initializers) and a Keras
  Constant are made from `Empty`: a graph constant's kernel (or a folded
  Fill's) would keep the whole tensor beside the variable."""
  with tf.Graph().as_default() as graph:
    with partitioning.partitioned_variables(4, min_slice_bytes=1000):
      table = tf.compat.v1.get_variable(
          "table", [1000, 8],
          initializer=tf.keras.initializers.Constant(0.5))
      loss = tf.reduce_sum(tf.nn.embedding_lookup(table, [1, 998]))
      train = optimizers.make_optimizer(
          optimizer, 0.1, initial_accumulator_value=0.25).minimize(loss)
    slots = [v for v in tf.compat.v1.global_variables()
             if v.op.name.endswith(slot)]
    # A Fill of constants is folded into one.
    constants = [op.name for op in graph.get_operations()
                 if op.type in ("Const", "Fill")
                 and op.outputs[0].shape.num_elements() >= 250 * 8]
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      initial = sess.run([tf.concat(list(table), 0), slots])
      sess.run(train)
  assert len(slots) == 4 and not constants, constants
  assert np.all(initial[0] == 0.5)
  assert all(np.all(slot == 0.25) for slot in initial[1])


def test_keras_optimizer_slots_of_parts_are_made_without_graph_constants():
  """The canned estimators' Keras optimizers name the slot's shape by
  keyword; their accumulators must come from `Empty` too."""
  with tf.Graph().as_default() as graph:
    with partitioning.partitioned_variables(4, min_slice_bytes=1000):
      table = tf.compat.v1.get_variable(
          "table", [1000, 8], initializer=tf.keras.initializers.Zeros())
      loss = tf.reduce_sum(tf.nn.embedding_lookup(table, [1, 998]))
      optimizer = tf.keras.optimizers.legacy.Adagrad(
          0.1, initial_accumulator_value=0.25)
      train = optimizer.get_updates(loss, list(table))
    constants = [op.name for op in graph.get_operations()
                 if op.type in ("Const", "Fill")
                 and op.outputs[0].shape.num_elements() >= 250 * 8]
    slots = [optimizer.get_slot(part, "accumulator") for part in table]
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      initial = sess.run(slots)
      sess.run(train)
  assert not constants, constants
  assert all(np.all(slot == 0.25) for slot in initial)


def _ancestors(op):
  """Every op `op` waits for, through its inputs and control inputs."""
  seen, stack = set(), [op]
  while stack:
    current = stack.pop()
    for parent in [t.op for t in current.inputs] + current.control_inputs:
      if parent not in seen:
        seen.add(parent)
        stack.append(parent)
  return seen


def test_the_grouped_saver_writes_a_device_s_parts_one_group_after_another(
    tmp_path):
  class Config:
    keep_checkpoint_max = 2
    keep_checkpoint_every_n_hours = 10000

  with tf.Graph().as_default() as graph:
    with partitioning.partitioned_variables(4, 1000, max_part_bytes=4000):
      table = tf.compat.v1.get_variable("table", [1000, 8])
      tf.compat.v1.get_variable("bias", [3])
    saver = saving.grouped_saver(8000, Config)
    saver.build()
    saves = [op for op in graph.get_operations() if op.type == "SaveV2"]
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      values = sess.run(tf.concat(list(table), 0))
      path = saver.save(sess, str(tmp_path / "ckpt"))
  # 8 parts of 4,000 bytes, two to a group, then the bias alone: 5 writes,
  # each after the one before.
  assert len(saves) == 5, saves
  for before, after in zip(saves, saves[1:]):
    assert before in _ancestors(after), (before.name, after.name)
  shapes = dict(tf.train.list_variables(path))
  assert shapes["table"] == [1000, 8]
  assert np.array_equal(tf.train.load_checkpoint(path).get_tensor("table"),
                        values)


@pytest.mark.parametrize("own_saver", [False, True])
def test_training_under_ps_saves_a_task_s_parts_in_groups(own_saver,
                                                          monkeypatch):
  """The model_fn's own Saver (the framework's resuming one) gets the
  grouped builder; a model_fn with none gets a grouped Saver."""
  monkeypatch.setenv(environment.MIN_SLICE, str(1 << 20))
  topology = types.SimpleNamespace(
      backend=types.SimpleNamespace(name="parameter_server",
                                    tables_on_ps=True), is_chief=True,
      num_workers=1, worker_index=0, synchronous=False)
  config = tf.estimator.RunConfig()

  def model_fn(features, labels, mode, config):
    del features, labels, config
    table = tf.compat.v1.get_variable("table", [1 << 20, 4])
    loss = tf.reduce_sum(tf.nn.embedding_lookup(table, [3]))
    scaffold = tf.compat.v1.train.Scaffold(
        saver=tf.compat.v1.train.Saver(sharded=True, defer_build=True)
        if own_saver else None)
    return tf.estimator.EstimatorSpec(
        mode, loss=loss, scaffold=scaffold,
        train_op=tf.compat.v1.train.AdagradOptimizer(0.1).minimize(loss))

  with tf.Graph().as_default() as graph:
    with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(2)):
      spec = embeddings.place_variables(model_fn, 2, topology)(
          {}, None, "train", {}, config)
    saver = spec.scaffold.saver or tf.compat.v1.get_collection(
        tf.compat.v1.GraphKeys.SAVERS)[0]
    saver.build()
    saves = [op for op in graph.get_operations() if op.type == "SaveV2"]
  # A 16 MiB table over 2 ps tasks: a part of 8 MiB on each, and its
  # accumulator: each its own group, where TensorFlow's saver makes one
  # write per task.
  assert len(saves) == 4, [op.name for op in saves]

"""Dynamic tables split over parameter servers, in this process.

The ps tasks are in-process servers of a cluster of one worker and three ps
tasks; a table is made under `dynamic_ps.placement` as a parameter-server
job's model_fn makes it. Each id must live on the task its hash names,
within that task's share of the capacity, with every variable of its part
on that task; a table saved by two tasks restores into two, and is refused
by three, naming both counts.
"""
import socket

import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale import errors
from estimator_scale import topology as topology_lib
from estimator_scale.embeddings import dynamic
from estimator_scale.embeddings import dynamic_ps
from estimator_scale.embeddings import dynamic_ps_moves
from estimator_scale.train_ops import cowclip

OFFSET = 1 << 40
"""Added to small ids: raw ids are large."""


def _port():
  with socket.socket() as free:
    free.bind(("localhost", 0))
    return free.getsockname()[1]


@pytest.fixture(scope="module", name="worker")
def _worker():
  """The target of a worker in a cluster of three in-process ps tasks."""
  cluster = tf.train.ClusterSpec({
      "worker": [f"localhost:{_port()}"],
      "ps": [f"localhost:{_port()}" for _ in range(3)]})
  servers = [tf.distribute.Server(cluster, "worker", 0)] + [
      tf.distribute.Server(cluster, "ps", task) for task in range(3)]
  yield servers[0].target


def _table(ps_tasks, capacity, **options):
  """(ids placeholder, vectors, the PsTable, step increment) in the default
  graph, made as a one-worker asynchronous job's model_fn makes them."""
  step = tf.compat.v1.train.get_or_create_global_step()
  ids = tf.compat.v1.placeholder(tf.int64, [None])
  with dynamic_ps.placement(ps_tasks, topology_lib.Topology()):
    vectors = es.dynamic_embedding(ids, 4, capacity=capacity, name="t",
                                   **options)
  (table,) = dynamic.named_tables()
  return ids, vectors, table, step.assign_add(1)


def _session(target):
  return tf.compat.v1.Session(target, config=tf.compat.v1.ConfigProto(
      isolate_session_state=True))


def _train(session, ids, vectors, increment, batches):
  session.run([tf.compat.v1.global_variables_initializer(),
               tf.compat.v1.local_variables_initializer()])
  for batch in batches:
    session.run(vectors, {ids: np.asarray(batch, np.int64) + OFFSET})
    session.run(increment)


def test_capacity_is_split_over_the_tasks():
  assert dynamic_ps.split_capacity(10, 3) == [4, 3, 3]
  assert dynamic_ps.split_capacity(7, 1) == [7]
  assert sum(dynamic_ps.split_capacity(1001, 4)) == 1001


def test_each_id_lives_on_its_hashs_task_within_its_share(worker):
  with tf.Graph().as_default():
    ids, vectors, table, increment = _table(2, 10, min_count=2)
    assert [part.rows for part in table.parts] == [5, 5]
    for task, part in enumerate(table.parts):
      held = [part.pool, part.ids, part.last_seen, part.counts, part.fresh,
              part.sketch]
      assert {v.device for v in held} == {f"/job:ps/task:{task}"}
    # Ids 0..29 three at a time, each twice in a row: the table fills and
    # the least recently used rows go.
    batches = [[i, i + 1, i + 2] * 2 for i in range(0, 30, 3)]
    with _session(worker) as session:
      _train(session, ids, vectors, increment, batches)
      parts = session.run([(p.ids, p.last_seen) for p in table.parts])
      owner = session.run(dynamic.owners(
          tf.constant(np.arange(30, dtype=np.int64) + OFFSET), 2))
  held = set()
  for task, (row_ids, _) in enumerate(parts):
    mine = row_ids[row_ids >= 0] - OFFSET
    assert len(mine) <= 5
    assert all(owner[i] == task for i in mine), task
    held |= set(mine.tolist())
  assert 6 <= len(held) <= 10
  assert {27, 28, 29} <= held  # the last update's ids were admitted
  assert not held & {0, 1, 2}  # the first ones were evicted


def _with_adagrad(vectors, step):
  """Adagrad's update of `vectors`' table, and its slots."""
  return tf.compat.v1.train.AdagradOptimizer(0.1).minimize(
      tf.reduce_sum(vectors * vectors), global_step=step)


def _held(session, table):
  """{id: (row, Adagrad slot, last update)} of a table, over its parts."""
  held = {}
  for part in table.parts:
    family = dynamic_ps_moves.per_row_variables(part)
    ids, rows, slots, seen = session.run(
        [part.ids, part.pool, family["Adagrad"], part.last_seen])
    for r in np.flatnonzero(ids >= 0):
      held[int(ids[r])] = (rows[r], slots[r], seen[r])
  return held


def test_a_table_of_two_tasks_moves_into_three_before_its_first_lookup(
    worker, tmp_path):
  batches = [[i, i + 1] for i in range(0, 12, 2)]
  feed_all = np.arange(12) + OFFSET
  with tf.Graph().as_default():
    ids, vectors, table, _ = _table(2, 30)
    train = _with_adagrad(vectors, tf.compat.v1.train.get_global_step())
    saver = tf.compat.v1.train.Saver()
    with _session(worker) as session:
      session.run([tf.compat.v1.global_variables_initializer(),
                   tf.compat.v1.local_variables_initializer()])
      for batch in batches:
        session.run(train, {ids: np.asarray(batch) + OFFSET})
      saved = _held(session, table)
      path = saver.save(session, str(tmp_path / "ckpt"))
    whole = tf.train.load_checkpoint(path).get_variable_to_shape_map()
    assert whole["t"] == [30, 4] and whole["t/ids"] == [30]
    assert whole["t/Adagrad"] == [30, 4]
  assert len(saved) == 12
  for tasks, move in ((2, False), (3, False), (3, True)):
    with tf.Graph().as_default():
      ids, vectors, table, _ = _table(tasks, 30)
      _with_adagrad(vectors, tf.compat.v1.train.get_global_step())
      hook = dynamic_ps_moves.MoveHook([table], tasks)
      hook.begin()
      with _session(worker) as session:
        session.run(tf.compat.v1.local_variables_initializer())
        tf.compat.v1.train.Saver().restore(session, path)
        if move:
          hook.after_create_session(session, None)
        if tasks == 3 and not move:  # an asynchronous worker, too early
          with pytest.raises(tf.errors.InvalidArgumentError,
                             match=r"dynamic table \W+t\W+: its checkpoint "
                             r"was saved by\] \[2\] \[ps tasks.*this job "
                             "has 3"):
            session.run(vectors, {ids: feed_all})
          continue
        # The index is rebuilt from the restored ids, each on its task (or
        # the lookup fails), and every id has its row: nothing is admitted.
        session.run(vectors, {ids: feed_all})
        held = _held(session, table)
    assert sorted(held) == sorted(saved), tasks
    for key, (row, slot, seen) in saved.items():
      np.testing.assert_allclose(held[key][0], row, rtol=1e-6)
      np.testing.assert_allclose(held[key][1], slot, rtol=1e-6)
      assert held[key][2] >= seen


def _trained(session, train, read, feed):
  """`read` from fresh variables, and again after three updates."""
  session.run([tf.compat.v1.global_variables_initializer(),
               tf.compat.v1.local_variables_initializer()])
  before = session.run(read, feed)
  for _ in range(3):
    session.run(train, feed)
  return before, session.run(read, feed)


def test_dense_features_and_the_keras_layer_split_and_train(worker):
  # The same ids through a DenseFeatures column and an es.DynamicEmbedding
  # layer: two split tables, trained alike by one Adagrad.
  column = es.dynamic_embedding_column(
      tf.feature_column.categorical_column_with_identity("a", 10), 4,
      capacity=8)
  with tf.Graph().as_default():
    step = tf.compat.v1.train.get_or_create_global_step()
    ids = tf.compat.v1.placeholder(tf.int64, [None])
    with dynamic_ps.placement(2, topology_lib.Topology()):
      columns = tf.keras.layers.DenseFeatures([column], name="deep")(
          {"a": ids[:, None]})
      keras_layer = es.DynamicEmbedding(4, 8, name="layer")
      layer = keras_layer(ids)
    tables = dynamic.named_tables()
    assert [type(t) for t in tables] == [dynamic_ps.PsTable] * 2
    assert ([v.ref() for v in keras_layer.trainable_weights]
            == [part.pool.ref() for part in tables[1].parts])
    train = tf.compat.v1.train.AdagradOptimizer(0.1).minimize(
        tf.reduce_sum(columns) + tf.reduce_sum(layer), global_step=step)
    feed = {ids: np.arange(1, 5) + OFFSET}
    with _session(worker) as session:
      before, after = _trained(session, train, [columns, layer], feed)
      held = session.run([[p.ids for p in t.parts] for t in tables])
  np.testing.assert_allclose(after[0], after[1], rtol=1e-6)
  assert np.abs(after[1] - before[1]).min() > 1e-3  # every id's row trained
  for parts in held:
    assert sorted(np.concatenate(parts)[np.concatenate(parts) >= 0]
                  - OFFSET) == [1, 2, 3, 4]
    assert all((part >= 0).sum() >= 1 for part in parts)


def test_a_feature_layer_lists_every_part_for_a_keras_optimizer(worker):
  # A canned estimator trains what its Keras model lists, with a Keras
  # optimizer: a part the layer did not list would never train.
  column = es.dynamic_embedding_column(
      tf.feature_column.categorical_column_with_identity("a", 10), 4,
      capacity=8)
  with tf.Graph().as_default():
    ids = tf.compat.v1.placeholder(tf.int64, [None])
    with dynamic_ps.placement(2, topology_lib.Topology()):
      layer = tf.keras.layers.DenseFeatures([column], name="deep")
      vectors = layer({"a": ids[:, None]})
    (table,) = dynamic_ps.tables()
    assert ({v.ref() for v in layer.trainable_weights}
            == {part.pool.ref() for part in table.parts})
    adagrad = tf.keras.optimizers.legacy.Adagrad(0.1)
    dynamic.reset_slots_on_admission(adagrad)
    train = adagrad.get_updates(tf.reduce_sum(vectors),
                                layer.trainable_weights)
    feed = {ids: np.arange(1, 5) + OFFSET}
    with _session(worker) as session:
      before, after = _trained(session, train, vectors, feed)
      held = session.run([part.ids for part in table.parts])
    slots = [adagrad.get_slot(part.pool, "accumulator")
             for part in table.parts]
  assert all((part >= 0).sum() >= 1 for part in held)
  assert np.abs(after - before).min() > 1e-3  # every id's row trained
  for task, slot in enumerate(slots):
    assert slot.device.endswith(f"/job:ps/task:{task}")


def test_each_parts_gradient_counts_its_ids_lookups_for_cowclip(worker):
  # CowClip bounds an id's gradient by its lookups in the update; on ps
  # tasks each part's gradient rows must carry their own ids' counts.
  batch = np.array([1, 2, 2, 3, 3, 3, 9, 9, 9, 9, 14], np.int64)
  with tf.Graph().as_default():
    ids, vectors, table, _ = _table(2, 16)
    pools = [part.pool for part in table.parts]
    grads = [cowclip.with_counts(grad, pool) for grad, pool in
             zip(tf.gradients(tf.reduce_sum(vectors), pools), pools)]
    with _session(worker) as session:
      session.run([tf.compat.v1.global_variables_initializer(),
                   tf.compat.v1.local_variables_initializer()])
      found = session.run([(g.indices, g.values[:, -1]) for g in grads],
                          {ids: batch + OFFSET})
      held = session.run([part.ids for part in table.parts])
  counted = {}
  for (rows, counts), part_ids in zip(found, held):
    assert len(rows)  # both parts hold some of the ids
    counted.update(zip(part_ids[rows] - OFFSET, counts))
  assert counted == {1: 1, 2: 2, 3: 3, 9: 4, 14: 1}


def test_what_cannot_be_split_is_refused_by_name():
  with tf.Graph().as_default():
    with dynamic_ps.placement(3, topology_lib.Topology()):
      with pytest.raises(errors.ConfigError,
                         match="capacity=2 is smaller than the 3 ps"):
        es.dynamic_embedding(tf.constant([1], tf.int64), 4, 2)
      column = es.dynamic_embedding_column(
          tf.feature_column.categorical_column_with_identity("a", 10), 4,
          capacity=8)
      with pytest.raises(errors.ConfigError, match="DenseFeatures"):
        tf.compat.v1.feature_column.input_layer(
            {"a": tf.constant([[1]], tf.int64)}, [column])


def test_a_table_of_one_process_refused_for_many_says_what_to_use():
  with tf.Graph().as_default():
    es.dynamic_embedding(tf.constant([1], tf.int64), 4, 10)
    with pytest.raises(errors.ConfigError,
                       match="parameter servers.*or a hashed table"):
      dynamic.check_trainers(topology_lib.Topology(num_workers=2))

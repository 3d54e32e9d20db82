"""Sharded tables in one process: the plain path (the function, the Keras
layer, the feature column), the norms AdaScale takes,
what the Horovod reducer does with a shard's gradient, loss scaling's
agreement on finiteness, and the whole tables evaluation and export
restore. The exchange
itself needs real ranks: see
tests/integration/test_sharded_embedding_multiprocess.py."""
import copy

import horovod.tensorflow as hvd
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.ops import variables as tf_variables  # pylint: disable=g-direct-tensorflow-import

import estimator_scale as es
from estimator_scale.backends.horovod import reducer
from estimator_scale.backends.horovod import stop
from estimator_scale.backends import reducers
from estimator_scale.embeddings import shard_checkpoints
from estimator_scale.embeddings import sharded
from estimator_scale.embeddings import sharded_layers
from estimator_scale.train_ops import accumulation
from estimator_scale import precision
from estimator_scale.train_ops import update
from tests.workers.sharded_equivalence import row_initializer


@pytest.fixture(autouse=True)
def _no_launcher(monkeypatch):
  for name in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
    monkeypatch.delenv(name, raising=False)


def _shard(name="table", rows=4, dimension=2):
  """A variable made as `sharded_embedding` makes a rank's shard."""
  return tf.compat.v1.get_variable(
      name, [rows, dimension], initializer=tf.compat.v1.ones_initializer(),
      collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES, sharded.COLLECTION])


def test_outside_horovod_the_table_is_one_plain_variable():
  with tf.Graph().as_default():
    ids = tf.constant([[3, 0], [9, 3]], tf.int64)
    vectors = es.sharded_embedding(ids, 10, 3, name="t",
                                   initializer=row_initializer)
    (table,) = tf.compat.v1.global_variables()
    assert table.shape == (10, 3) and not sharded.is_sharded(table)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      got, whole = sess.run([vectors, table])
  assert got.shape == (2, 2, 3)
  np.testing.assert_array_equal(got, whole[[[3, 0], [9, 3]]])


def test_shards_cover_the_table_and_every_id_finds_its_owner():
  for rows, shards in ((50, 3), (4, 4), (10, 3), (9, 3)):
    ranges = [sharded.shard_range(rows, shards, i) for i in range(shards)]
    owners = np.repeat(np.arange(shards), [n for _, n in ranges])
    assert [start for start, _ in ranges] == list(
        np.cumsum([0] + [n for _, n in ranges[:-1]]))
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
      got = sess.run(sharded._owners(tf.range(rows, dtype=tf.int64), rows,
                                     shards))
    np.testing.assert_array_equal(got, owners)


def test_bad_sizes_are_refused():
  with tf.Graph().as_default(), pytest.raises(es.errors.ConfigError,
                                               match="vocabulary_size=0"):
    es.sharded_embedding(tf.constant([1]), 0, 3, name="t")


def test_replica_norm_merges_a_tables_lookups_by_id():
  """This rank's own gradient of the table: rows summed over its lookups;
  the shard's gradient (every rank's) does not count."""
  with tf.Graph().as_default():
    shard, dense = _shard(), tf.compat.v1.get_variable("w", [2])
    lookups = [sharded.Lookup(shard, tf.constant([1, 2], tf.int64), None),
               sharded.Lookup(shard, tf.constant([2, 5], tf.int64), None)]
    vector_grads = [tf.constant([[1.0, 0.0], [2.0, 0.0]]),
                    tf.constant([[3.0, 0.0], [0.0, 1.0]])]
    shard_grad = tf.IndexedSlices(tf.constant([[100.0, 0.0]]),
                                  tf.constant([0]))
    norm = sharded.replica_squared_norm(
        [tf.constant([1.0, 1.0]), shard_grad], [dense, shard], lookups,
        vector_grads)
    with tf.compat.v1.Session() as sess:
      # w: 2; id 1: 1; id 2: (2 + 3)^2 = 25; id 5: 1.
      assert sess.run(norm) == pytest.approx(29.0)


def test_mean_norm_is_split_into_the_rest_and_the_shards():
  with tf.Graph().as_default():
    shard, dense = _shard(), tf.compat.v1.get_variable("w", [2])
    mean = [tf.constant([3.0, 4.0]),
            tf.IndexedSlices(tf.constant([[1.0, 1.0], [1.0, 0.0]]),
                             tf.constant([0, 0]))]
    rest, shards = sharded.mean_squared_norm(mean, [dense, shard])
    assert rest[0] is mean[0] and rest[1] is None
    with tf.compat.v1.Session() as sess:
      assert sess.run(shards) == pytest.approx(5.0)  # row 0: (2, 1)


class _TwoRanks:
  """Sums as two ranks holding the same tensors would."""
  Compression = hvd.Compression
  Sum = hvd.Sum
  groups = []

  @staticmethod
  def size():
    return 2

  @classmethod
  def grouped_allreduce(cls, tensors, op):
    del op
    cls.groups.append(list(tensors))
    return [2 * t for t in tensors]


def test_horovod_reducer_keeps_shards_out_of_the_exchange_and_broadcast():
  """A shard's gradient is already its rows' mean: it is not allreduced,
  and its optimizer slots stay local (rank 0's broadcast skips them)."""
  _TwoRanks.groups.clear()
  with tf.Graph().as_default():
    shard, dense = _shard(), tf.compat.v1.get_variable(
        "w", [2], initializer=tf.compat.v1.zeros_initializer())
    grads = [tf.constant([1.0, 2.0]),
             tf.IndexedSlices(tf.constant([[1.0, 1.0], [2.0, 2.0]]),
                              tf.constant([3, 3]), tf.constant([4, 2]))]
    horovod = reducer.HorovodReducer(_TwoRanks, "none", stop.StopFlag())
    horovod.expect([dense, shard], tf.constant(0.0))
    means, _ = horovod.all_mean(grads, [])
    exchanged = [t for group in _TwoRanks.groups for t in group]
    assert grads[1].values not in exchanged
    assert len(exchanged) == 2  # w's gradient and the stop flag
    optimizer = tf.compat.v1.train.AdagradOptimizer(0.1)
    horovod.apply_reduced(optimizer, means, [dense, shard], None)
    slot = optimizer.get_slot(shard, "accumulator")
    assert slot not in tf.compat.v1.global_variables()
    assert slot in tf.compat.v1.local_variables()
    assert optimizer.get_slot(dense, "accumulator") in (
        tf.compat.v1.global_variables())
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.local_variables_initializer())
      rows, values = sess.run([means[1].indices, means[1].values])
  assert list(rows) == [3] and values.tolist() == [[3.0, 3.0]]


class _Rank:
  def __init__(self, rank):
    self._rank = rank

  def rank(self):
    return self._rank


def test_a_model_dir_the_ranks_do_not_share_is_refused_in_one_line():
  shard_checkpoints.check_shared("/d", _Rank(0), 7, lambda: None)  # rank 0
  shard_checkpoints.check_shared("/d", _Rank(1), 7, lambda: 7)  # shared
  for seen in (None, 3):  # nothing there, or another job's token
    with pytest.raises(es.errors.ConfigError,
                       match=r"^sharded tables need a --model_dir every "
                       r"Horovod rank shares; rank 1 [^\n]*/d[^\n]*$"):
      shard_checkpoints.check_shared("/d", _Rank(1), 7, lambda: seen)  # pylint: disable=cell-var-from-loop


def _save_as_two_ranks(directory, rows, step):
  """The checkpoints a 2-rank job leaves at `step`: Estimator's (the dense
  variable and the step) and the merged slices of the table."""
  prefix = str(directory / f"model.ckpt-{step}")
  tables = directory / shard_checkpoints.DIRECTORY
  with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    global_step = tf.compat.v1.train.get_or_create_global_step()
    dense = tf.compat.v1.get_variable("model/w", initializer=[1.0, 2.0])
    savers = []
    for rank in range(2):
      first, count = sharded.shard_range(len(rows), 2, rank)
      shard = tf.compat.v1.get_variable(
          f"shard{rank}", initializer=rows[first:first + count])
      shard._set_save_slice_info(tf_variables.Variable.SaveSliceInfo(  # pylint: disable=protected-access
          "model/table", list(rows.shape), [first, 0], [count, rows.shape[1]]))
      savers.append(tf.compat.v1.train.Saver([shard]))
    sess.run(tf.compat.v1.global_variables_initializer())
    sess.run(global_step.assign(step))
    tf.compat.v1.train.Saver([global_step, dense]).save(sess, prefix)
    parts = [str(tables / f"ckpt-{step}-rank{r}") for r in range(2)]
    for saver, part in zip(savers, parts):
      saver.save(sess, part, write_meta_graph=False, write_state=False)
    sess.run(tf.raw_ops.MergeV2Checkpoints(
        checkpoint_prefixes=parts,
        destination_prefix=str(tables / f"ckpt-{step}")))
  return prefix


def test_a_whole_table_restores_from_the_merged_slices_of_its_step(tmp_path):
  """Evaluation and export read the table whole, from the merged shards of
  the step Estimator's checkpoint is at; the rest from that checkpoint."""
  rows = np.arange(14, dtype=np.float32).reshape(7, 2)
  prefix = _save_as_two_ranks(tmp_path, rows, step=5)
  with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    tf.compat.v1.train.get_or_create_global_step()
    dense = tf.compat.v1.get_variable("model/w", [2])
    table = tf.compat.v1.get_variable("model/table", [7, 2])
    saver = shard_checkpoints.WholeTablesSaver([table.op.name])
    saver.restore(sess, prefix)
    got_table, got_dense = sess.run([table, dense])
  np.testing.assert_array_equal(got_table, rows)
  assert got_dense.tolist() == [1.0, 2.0]
  for name in tf.io.gfile.glob(str(tmp_path / "sharded_tables" / "ckpt-5.*")):
    tf.io.gfile.remove(name)
  with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    tf.compat.v1.train.get_or_create_global_step()
    tf.compat.v1.get_variable("model/w", [2])
    table = tf.compat.v1.get_variable("model/table", [7, 2])
    saver = shard_checkpoints.WholeTablesSaver([table.op.name])
    with pytest.raises(es.errors.ConfigError,
                       match=r"holds the sharded tables model/table in "
                       r".*sharded_tables/ckpt-5, which is missing"):
      saver.restore(sess, prefix)


def test_whole_tables_are_plain_variables_even_under_horovod(monkeypatch):
  """Inside `whole_tables` the lookup asks no rank for anything."""
  monkeypatch.setattr(sharded, "horovod", lambda: pytest.fail("asked"))
  with tf.Graph().as_default(), sharded.whole_tables(), \
      tf.compat.v1.variable_scope("model", reuse=tf.compat.v1.AUTO_REUSE):
    es.sharded_embedding(tf.constant([1, 2]), 10, 3, name="t")
    es.sharded_embedding(tf.constant([4]), 10, 3, name="t")  # reused
    (table,) = tf.compat.v1.global_variables()
    assert tf.compat.v1.get_collection(sharded.WHOLE_COLLECTION) == [table]


def _ids_column():
  return tf.feature_column.categorical_column_with_identity("ids", 10)


def test_the_layer_and_the_column_look_up_as_the_function_and_keras_do():
  """One table made four ways from the same per-row initializer: the
  function, the Keras layer, the column through input_layer and through
  DenseFeatures; the column equals embedding_column, its names too."""
  ids = np.array([[3, 0, 7], [9, 3, 3]], np.int64)
  with tf.Graph().as_default():
    function = es.sharded_embedding(tf.constant(ids), 10, 3, name="t",
                                    initializer=row_initializer)
    layer = es.ShardedEmbedding(10, 3, embeddings_initializer=row_initializer)
    keras = layer(tf.constant(ids))
    assert layer.trainable_weights == [layer.embeddings]
    assert layer.embeddings.op.name == "sharded_embedding/embeddings"
    looked_up = {}
    for combiner in ("mean", "sqrtn", "sum"):
      with tf.compat.v1.variable_scope(combiner):
        for kind, make in (("sharded", es.sharded_embedding_column),
                           ("plain", tf.feature_column.embedding_column)):
          column = make(_ids_column(), 3, combiner=combiner,
                        initializer=row_initializer)
          looked_up[combiner, kind, "v1"] = (
              tf.compat.v1.feature_column.input_layer({"ids": ids}, [column]))
          looked_up[combiner, kind, "v2"] = tf.keras.layers.DenseFeatures(
              [column], name=f"{kind}_features")({"ids": ids})
    names = {v.op.name for v in tf.compat.v1.trainable_variables()}
    assert "mean/input_layer/ids_embedding/embedding_weights" in names
    assert "mean/sharded_features/ids_embedding/embedding_weights" in names
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      function, keras, looked_up = sess.run([function, keras, looked_up])
  np.testing.assert_array_equal(keras, function)
  for (combiner, kind, route), value in looked_up.items():
    np.testing.assert_allclose(value, looked_up[combiner, "plain", route],
                               rtol=1e-6, err_msg=f"{combiner} {route}")


def test_the_column_drops_what_a_safe_lookup_drops():
  """Weighted ids: a weight <= 0 and an id < 0 are dropped; an example
  left without ids gets zeros, as embedding_column gives."""
  with tf.Graph().as_default():
    ids = tf.SparseTensor([[0, 0], [0, 1], [1, 0], [2, 0]],
                          tf.constant([4, 2, -1, 5], tf.int64), [3, 2])
    weights = tf.SparseTensor(ids.indices, [2.0, 0.5, 1.0, -1.0], [3, 2])
    table = tf.compat.v1.get_variable("t", [10, 3],
                                      initializer=row_initializer)
    got = sharded_layers.combine(lambda i: sharded.lookup(table, i), ids,
                                 weights, "mean")
    want = tf.nn.safe_embedding_lookup_sparse(table, ids, weights, "mean")
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      got, want = sess.run([got, want])
  assert not got[1:].any()
  np.testing.assert_allclose(got, want, rtol=1e-6)


def test_layer_and_column_tables_are_whole_in_evaluation_and_export(
    monkeypatch):
  monkeypatch.setattr(sharded, "horovod", lambda: pytest.fail("asked"))
  with tf.Graph().as_default(), sharded.whole_tables():
    es.ShardedEmbedding(10, 3)(tf.constant([1, 2]))
    tf.compat.v1.feature_column.input_layer(
        {"ids": tf.constant([[1]])},
        [es.sharded_embedding_column(_ids_column(), 3)])
    tables = tf.compat.v1.get_collection(sharded.WHOLE_COLLECTION)
    assert [t.shape for t in tables] == [(10, 3), (10, 3)]
  column = es.sharded_embedding_column(_ids_column(), 3, compression="fp16")
  assert copy.deepcopy(column).compression == "fp16"


@pytest.mark.parametrize("make,message", [
    (lambda: es.ShardedEmbedding(10, 3, compression="int8"),
     r"compression='int8' is unknown; valid: none, fp16"),
    (lambda: es.ShardedEmbedding(0, 3), r"vocabulary_size=0 must be"),
    (lambda: es.ShardedEmbedding(10, 2.5), r"dimension=2.5 must be"),
    (lambda: es.sharded_embedding_column(_ids_column(), 3, combiner="max"),
     r"combiner='max' is unknown; valid: mean, sqrtn, sum"),
    (lambda: es.sharded_embedding_column(_ids_column(), 3,
                                         compression="bf16"),
     r"compression='bf16' is unknown"),
    (lambda: es.sharded_embedding(tf.constant([1]), 10, 3,
                                  compression="fp8"),
     r"compression='fp8' is unknown"),
])
def test_bad_arguments_are_refused_naming_them(make, message):
  with tf.Graph().as_default(), pytest.raises(es.errors.ConfigError,
                                               match=message):
    make()


def test_under_mixed_precision_tables_stay_variables_and_vectors_follow():
  """The float16 network scope does not cast a table (a cast would copy it
  whole each step, and a shard must stay a variable); the vectors come in
  float16, as the network's other variables are read."""
  with tf.Graph().as_default(), precision.network_scope("mixed_float16"):
    vectors = es.sharded_embedding(tf.constant([1, 2]), 10, 3, name="t")
    keras = es.ShardedEmbedding(10, 3)(tf.constant([1, 2]))
    dense = tf.compat.v1.get_variable("w", [3])
    tables = tf.compat.v1.get_collection(sharded.WHOLE_COLLECTION)
  assert all(isinstance(t, tf.Variable) for t in tables) and len(tables) == 2
  assert vectors.dtype == tf.float16 and keras.dtype == tf.float16
  assert dense.dtype == tf.float16  # other variables are still cast


class _OtherRankNotFinite(reducers.LocalReducer):
  """A reducer whose sums come back as if another rank added 1."""

  def all_mean(self, grads, sums):
    return list(grads), [s + 1.0 for s in sums]


def test_loss_scaling_skips_when_any_ranks_shard_is_not_finite():
  with tf.Graph().as_default():
    shard, dense = _shard(), tf.compat.v1.get_variable("w", [2])
    rows = tf.IndexedSlices(tf.constant([[1.0, 2.0]]), tf.constant([0]))
    finite = accumulation.Gradients([tf.constant([1.0, 1.0]), rows],
                                    [dense, shard], tf.constant(0.0), None)
    not_here = tf.IndexedSlices(tf.constant([[np.inf, 2.0]]),
                                tf.constant([0]))
    flags = [sharded.nonfinite_shards([g, rows], [dense, shard])
             for g in (tf.constant([np.inf, 0.0]), tf.constant([0.0, 0.0]))]
    flags.append(sharded.nonfinite_shards([None, not_here], [dense, shard]))
    _, alone = update._finite_mean(reducers.LocalReducer(), finite)
    _, elsewhere = update._finite_mean(_OtherRankNotFinite(), finite)
    with tf.compat.v1.Session() as sess:
      assert sess.run(flags) == [0.0, 0.0, 1.0]  # the shard's own only
      assert sess.run([alone, elsewhere]) == [True, False]

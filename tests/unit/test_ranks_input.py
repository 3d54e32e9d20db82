"""The input of evaluation and prediction on Horovod ranks: a rank's own
batches, then empty ones made from the dataset's spec, so that a rank
whose input is empty from the start pads as well."""
import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale.backends.horovod import evaluation


def _batches(input_fn, count):
  dataset = input_fn(mode="infer", params={}, config=None)
  return list(dataset.take(count))


def _clicks(rows):
  def input_fn():
    ids = np.arange(rows, dtype=np.int64).reshape(-1, 1)
    sparse = tf.sparse.from_dense(tf.constant(ids))
    ragged = tf.RaggedTensor.from_tensor(tf.constant(ids, tf.float32))
    return tf.data.Dataset.from_tensor_slices(
        ({"ids": ids, "sparse": sparse, "ragged": ragged},
         np.ones(rows, np.float32))).batch(2)
  return input_fn


def test_each_rank_reads_its_batches_then_empty_ones():
  first, second = (_batches(evaluation.split_input(_clicks(5), r, 2, None), 4)
                   for r in (0, 1))
  assert [b[1].shape[0] for b in first] == [2, 1, 0, 0]   # batches 0, 2
  assert [b[1].shape[0] for b in second] == [2, 0, 0, 0]  # batch 1
  (features, labels), = first[2:3]
  assert features["ids"].shape == (0, 1) and labels.shape == (0,)
  assert features["sparse"].dense_shape.numpy().tolist() == [0, 1]
  assert features["ragged"].nrows() == 0


def test_an_empty_input_pads_from_its_spec():
  batches = _batches(evaluation.split_input(_clicks(0), 0, 1, None), 3)
  assert [b[1].shape[0] for b in batches] == [0, 0, 0]
  assert batches[0][0]["ids"].shape == (0, 1)


def test_a_feature_of_unknown_rank_is_named():
  def input_fn():
    dataset = tf.data.Dataset.from_tensors({"x": [1.0]})
    return dataset.map(lambda f: {"x": tf.numpy_function(
        lambda v: v, [f["x"]], tf.float32)})
  with pytest.raises(es.errors.ConfigError, match="rank is unknown"):
    evaluation.split_input(input_fn, 0, 1, None)(
        mode="infer", params={}, config=None)

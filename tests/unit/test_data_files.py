"""The user's TFRecord and CSV files: how they are written, read and checked.

The command line training on them is tests/integration/test_data_files_cli.py.
"""
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale.inputs import data_files
from model_zoo import digits
from model_zoo import digits_data


def test_csv_columns_follow_the_feature_spec(tmp_path):
  spec = {"image": tf.io.FixedLenFeature([2, 2, 1], tf.float32),
          "label": tf.io.FixedLenFeature([], tf.int64)}
  data_files.write_csv({"image": [[[[0.5], [1]], [[2], [3]]]]}, [7],
                       str(tmp_path / "a.csv"), spec)
  header, row = (tmp_path / "a.csv").read_text().splitlines()
  assert header == "image_0,image_1,image_2,image_3,label"
  input_fn = data_files.from_files(str(tmp_path / "*.csv"), spec, "label", 1,
                                   training=False)
  features, labels = next(iter(input_fn()))
  assert features["image"].numpy().reshape(-1).tolist() == [0.5, 1, 2, 3]
  assert labels.numpy().tolist() == [7]
  bad = {"pixels": spec["image"], "label": spec["label"]}
  with pytest.raises(es.errors.DataError, match=r"a\.csv: the header lacks "
                                                 r"the columns \['pixels_0'"):
    data_files.from_files(str(tmp_path / "*.csv"), bad, "label", 1)


def test_csv_without_labels_yields_features_only(tmp_path):
  spec = {"image": tf.io.FixedLenFeature([2], tf.float32)}
  data_files.write_csv({"image": [[0.5, 1.0], [2.0, 3.0]]}, None,
                       str(tmp_path / "a.csv"), spec)
  assert (tmp_path / "a.csv").read_text().splitlines()[0] == "image_0,image_1"
  input_fn = data_files.from_files(str(tmp_path / "*.csv"), spec, None, 2,
                                   training=False)
  (batch,) = list(input_fn())
  assert isinstance(batch, dict) and list(batch) == ["image"]
  assert batch["image"].numpy().tolist() == [[0.5, 1.0], [2.0, 3.0]]


def _truncated_shards(directory):
  """Two digits shards, the second cut short mid-record."""
  (images, labels), _ = digits_data.load_split()
  paths = es.inputs.write_tfrecord_shards({"image": images[:64]}, labels[:64],
                                          str(directory), 2)
  data = open(paths[1], "rb").read()
  with open(paths[1], "wb") as f:
    f.write(data[:len(data) - 100])
  return paths


def test_a_truncated_shard_is_named_or_skipped(tmp_path):
  paths = _truncated_shards(tmp_path)
  estimator = es.make_estimator(digits.DigitsMLP(), model_dir=str(tmp_path /
                                                                  "model"))
  pattern = str(tmp_path / "*.tfrecord")
  eval_fn = estimator.files_input_fn(pattern, tf.estimator.ModeKeys.EVAL, 8)
  train_fn = estimator.files_input_fn(pattern, tf.estimator.ModeKeys.TRAIN, 8)
  with pytest.raises(es.errors.DataError,
                     match=f"{paths[1]}: .*truncated.*skip_corrupt"):
    estimator.train(train_fn, max_steps=20)
  skipping = estimator.files_input_fn(pattern, tf.estimator.ModeKeys.TRAIN, 8,
                                      skip_corrupt=True)
  estimator.train(skipping, max_steps=20)
  with pytest.raises(es.errors.DataError, match=paths[1]):
    estimator.evaluate(eval_fn)


def _read_all(paths):
  for _ in tf.data.TFRecordDataset(paths):
    pass


def test_corrupt_file_is_named_from_the_files_given(tmp_path):
  paths = _truncated_shards(tmp_path)
  with pytest.raises(es.errors.DataError,
                     match=f"^{paths[1]}: .*truncated.*skip_corrupt"):
    with data_files.naming_corrupt_files(paths):
      _read_all(paths)
  # Without files there is nothing to name: TensorFlow's error passes.
  with pytest.raises(tf.errors.DataLossError):
    with data_files.naming_corrupt_files(()):
      _read_all(paths)


def test_files_of_an_input_fn(tmp_path):
  paths = _truncated_shards(tmp_path)
  spec = digits.DigitsMLP().feature_spec()
  input_fn = data_files.from_files(str(tmp_path / "*.tfrecord"), spec,
                                   "label", 8)
  assert data_files.files_of(input_fn) == tuple(paths)
  assert data_files.files_of(lambda: None) == ()

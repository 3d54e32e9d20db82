"""scikit-learn's handwritten digits (UCI, 1,797 8x8 images), split and sharded.

The split is fixed: `train_test_split(test_size=360, random_state=0,
stratify=labels)`, i.e. 1,437 training and 360 test images, pixels scaled
to [0, 1]. Both splits are written once as TFRecord shards under a cache
directory and read back through `estimator_scale.inputs.from_tfrecords`.
"""
import os

import numpy as np
import tensorflow as tf

from estimator_scale import inputs
from model_zoo import generated_data

TEST_SIZE = 360
SPLIT_SEED = 0
NUM_SHARDS = 4
FEATURE_SPEC = {"image": tf.io.FixedLenFeature([8, 8, 1], tf.float32),
                "label": tf.io.FixedLenFeature([], tf.int64)}


def load_split():
  """((train_images, train_labels), (test_images, test_labels)) as arrays."""
  from sklearn import datasets, model_selection  # pylint: disable=g-import-not-at-top
  digits = datasets.load_digits()
  images = (digits.images / 16.0).astype(np.float32)[..., None]
  labels = digits.target.astype(np.int64)
  train_x, test_x, train_y, test_y = model_selection.train_test_split(
      images, labels, test_size=TEST_SIZE, random_state=SPLIT_SEED,
      stratify=labels)
  return (train_x, train_y), (test_x, test_y)


def tfrecord_pattern(split, data_dir=None):
  """The glob of a split's shards, writing both splits first if missing
  (once, by one process; generated_data.folder says where)."""

  def write(folder):
    (train_x, train_y), (test_x, test_y) = load_split()
    inputs.write_tfrecord_shards({"image": train_x}, train_y, folder,
                                 NUM_SHARDS, prefix="train")
    inputs.write_tfrecord_shards({"image": test_x}, test_y, folder,
                                 NUM_SHARDS, prefix="test")

  root = generated_data.folder("digits-v1", write, data_dir)
  return os.path.join(root, f"{split}-*.tfrecord")


def input_fn(mode, global_batch_size, topology, accumulation_steps, seed=0,
             data_dir=None, with_labels=True):
  """The digits input_fn for a mode (train: repeat + shuffle; eval: test split).

  `with_labels=False` yields the images alone, as a label-free model (an
  autoencoder) trains on them.
  """
  training = mode == tf.estimator.ModeKeys.TRAIN
  if with_labels:
    feature_spec, label_key = FEATURE_SPEC, "label"
  else:
    feature_spec, label_key = {"image": FEATURE_SPEC["image"]}, None
  return inputs.from_tfrecords(
      tfrecord_pattern("train" if training else "test", data_dir),
      feature_spec, label_key, global_batch_size, training=training,
      topology=topology, accumulation_steps=accumulation_steps, seed=seed,
      shuffle_buffer=2048)

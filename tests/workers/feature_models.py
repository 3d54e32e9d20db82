"""Models over feature columns and lookup tables, and click-like data for them.

The data follow a planted logistic rule over categorical features (plus a
bucketized age), so the best AUC any model can reach on an evaluation set
is known: the AUC of the rule's own probabilities (`planted_auc`).

Every network is written as Estimator users write them in TF 2.15: feature
columns through `tf.compat.v1.feature_column.input_layer` (v1 style) or
the Keras `DenseFeatures` layer (the one that takes shared embeddings), and
tables made inline with `tf.lookup` or Keras lookup layers.
"""
import atexit
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf

import estimator_scale as es

COLORS = ("red", "green", "blue", "cyan", "magenta", "yellow", "black",
          "white")
DEVICES = ("phone", "tablet", "desktop", "tv", "watch")
CITIES = tuple(f"city_{i}" for i in range(40))
AGE_BOUNDARIES = (25.0, 35.0, 45.0, 55.0, 65.0)


def _vocabulary_file():
  """DEVICES one per line in a file of this process's own (a file column's
  input), gone when the process ends."""
  folder = tempfile.mkdtemp(prefix="devices")
  atexit.register(shutil.rmtree, folder, ignore_errors=True)
  path = os.path.join(folder, "devices.txt")
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(DEVICES) + "\n")
  return path


def _standardised_age(age):
  return (age - 50.0) / 20.0


def _columns(vocabulary_file):
  """Vocabulary list and file, hashed, crossed, bucketized, embedding, indicator."""
  fc = tf.feature_column
  color = fc.categorical_column_with_vocabulary_list("color", COLORS)
  device = fc.categorical_column_with_vocabulary_file(
      "device", vocabulary_file, vocabulary_size=len(DEVICES),
      num_oov_buckets=1)
  city = fc.categorical_column_with_hash_bucket("city", 1000)
  cross = fc.crossed_column(["color", "device"], 500)
  # Bucketized from the raw years; a normalizer would apply before the buckets.
  age = fc.bucketized_column(fc.numeric_column("age"), list(AGE_BOUNDARIES))
  initializer = tf.compat.v1.truncated_normal_initializer(stddev=0.1, seed=3)
  return color, device, city, cross, age, initializer


class FeatureColumns(es.ClassifierModel):
  """Every kind of column through `input_layer`, then one linear layer."""

  name = None

  def __init__(self, vocabulary_file=None):
    self.vocabulary_file = vocabulary_file or _vocabulary_file()

  def columns(self):
    fc = tf.feature_column
    color, device, city, cross, age, initializer = _columns(
        self.vocabulary_file)
    return [fc.embedding_column(color, 4, initializer=initializer),
            fc.indicator_column(device),
            fc.embedding_column(city, 4, initializer=initializer),
            fc.embedding_column(cross, 4, initializer=initializer),
            age,
            fc.numeric_column("age", normalizer_fn=_standardised_age)]

  def network_input(self, features):
    return tf.compat.v1.feature_column.input_layer(features, self.columns())

  def logits(self, features, training, params):
    net = self.network_input(features)
    return tf.keras.layers.Dense(
        2, name="out",
        kernel_initializer=tf.keras.initializers.GlorotUniform(seed=1))(net)

  def serving_features(self):
    return {"color": tf.TensorSpec([], tf.string),
            "device": tf.TensorSpec([], tf.string),
            "city": tf.TensorSpec([], tf.string),
            "age": tf.TensorSpec([], tf.float32)}


class SharedEmbeddings(FeatureColumns):
  """Two columns sharing one embedding table, through Keras' DenseFeatures."""

  def columns(self):
    fc = tf.feature_column
    color, device, city, _, age, initializer = _columns(self.vocabulary_file)
    home = fc.categorical_column_with_vocabulary_list("home_color", COLORS)
    shared = fc.shared_embeddings([color, home], 4, initializer=initializer)
    return shared + [fc.indicator_column(device),
                     fc.embedding_column(city, 4, initializer=initializer),
                     age]

  def network_input(self, features):
    return tf.keras.layers.DenseFeatures(self.columns(), name="features")(
        features)

  def serving_features(self):
    return dict(super().serving_features(),
                home_color=tf.TensorSpec([], tf.string))


class LookupTables(FeatureColumns):
  """Ids from tables the network makes inline, into Keras embeddings.

  A `tf.lookup.StaticHashTable` from inline constants, a
  `tf.lookup.StaticVocabularyTable` from the vocabulary file, and Keras'
  StringLookup and Hashing layers.
  """

  def network_input(self, features):
    colors = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(COLORS), tf.range(len(COLORS), dtype=tf.int64)),
        default_value=len(COLORS))
    devices = tf.lookup.StaticVocabularyTable(
        tf.lookup.TextFileInitializer(
            self.vocabulary_file, tf.string,
            tf.lookup.TextFileIndex.WHOLE_LINE, tf.int64,
            tf.lookup.TextFileIndex.LINE_NUMBER), num_oov_buckets=1)
    home = tf.keras.layers.StringLookup(vocabulary=list(COLORS))
    city = tf.keras.layers.Hashing(64)
    initializer = tf.keras.initializers.RandomNormal(stddev=0.1, seed=3)
    embedded = [
        tf.keras.layers.Embedding(size, 3, embeddings_initializer=initializer,
                                  name=name)(ids)
        for name, size, ids in (
            ("color", len(COLORS) + 1, colors.lookup(features["color"])),
            ("device", len(DEVICES) + 1, devices.lookup(features["device"])),
            ("home", len(COLORS) + 1, home(features["home_color"])),
            ("city", 64, city(features["city"])))]
    return tf.concat(embedded + [features["age"][:, None] / 100.0], 1)

  def serving_features(self):
    return dict(super().serving_features(),
                home_color=tf.TensorSpec([], tf.string))


MODELS = {"feature_columns": FeatureColumns,
          "shared_embeddings": SharedEmbeddings,
          "lookup_tables": LookupTables}
CASES = tuple(MODELS)


def _planted_weights():
  """The rule's weights, fixed whatever the data's seed."""
  rng = np.random.RandomState(1234)
  return {"color": rng.normal(0.0, 0.8, len(COLORS)),
          "device": rng.normal(0.0, 0.8, len(DEVICES)),
          "city": rng.normal(0.0, 0.8, len(CITIES)),
          "cross": rng.normal(0.0, 0.8, (len(COLORS), len(DEVICES))),
          "age": rng.normal(0.0, 0.8, len(AGE_BOUNDARIES) + 1),
          "bias": -0.3}


def planted_data(count, seed=0):
  """(features, labels, probabilities) drawn from the planted rule.

  Categories are Zipf-like (a few common, many rare), as ids in click logs
  are; `probabilities` are the rule's own, the best any model can predict.
  """
  rng = np.random.RandomState(seed)
  weights = _planted_weights()

  def draw(values):
    popularity = 1.0 / np.arange(1, len(values) + 1)
    return rng.choice(len(values), count, p=popularity / popularity.sum())

  color, device, city, home = (draw(COLORS), draw(DEVICES), draw(CITIES),
                               draw(COLORS))
  age = rng.uniform(18.0, 80.0, count).astype(np.float32)
  logit = (weights["color"][color] + weights["device"][device] +
           weights["city"][city] + weights["cross"][color, device] +
           weights["age"][np.searchsorted(AGE_BOUNDARIES, age, side="right")]
           + weights["bias"])
  probabilities = 1.0 / (1.0 + np.exp(-logit))
  labels = (rng.uniform(size=count) < probabilities).astype(np.int64)
  names = lambda values, ids: np.array(values, dtype=object)[ids].astype(bytes)
  features = {"color": names(COLORS, color), "device": names(DEVICES, device),
              "city": names(CITIES, city), "home_color": names(COLORS, home),
              "age": age, "id": np.arange(count)}
  return features, labels, probabilities


def generated_data(case, count, seed=0):
  """(model, features, labels) for `case` of `CASES`."""
  features, labels, _ = planted_data(count, seed)
  return MODELS[case](), features, labels

"""A click model on MovieLens-100k: user and item embeddings plus features.

Each rating is a click when it is 4 or 5 (`movielens_data`). The model is
the shape most recommendation models share: an embedding per user id and
per movie id, embeddings of the user's gender, occupation and age bucket,
the movie's genres and release year, all concatenated into an MLP; plus a
bias per user and per movie (one-wide embeddings, a linear part whose
gradients stay sparse), the part that learns how generous a user is and how
liked a movie is. It is a click model like wide & deep: a
`es.BinaryClassifierModel`, whose loss (log loss), click probability and
metrics (AUC, accuracy, calibration, ...) it shares.

`embedding=dynamic` (default "hashed": plain tables) gives the MLP's user
and movie embeddings dynamic tables (each id its own row, capacity the ids
MovieLens has, `min_count` and `steps_to_live` as in wide_deep); the biases
stay plain tables.
"""
import tensorflow as tf

import estimator_scale as es
from model_zoo import movielens_data
from model_zoo import wide_deep

DEFAULT_HPARAMS = {"hidden_units": [64, 32], "id_embedding_dim": 16,
                   "feature_embedding_dim": 4,
                   "age_boundaries": [18, 25, 35, 45, 50, 56],
                   "embedding": "hashed", "min_count": 1, "steps_to_live": 0}


def _ids(name, count):
  """A categorical column over 0..count (MovieLens' ids start at 1)."""
  return tf.feature_column.categorical_column_with_identity(name, count + 1)


def deep_columns(params):
  """What the MLP reads: id embeddings, user and movie features."""
  dim = params["feature_embedding_dim"]
  age = tf.feature_column.bucketized_column(
      tf.feature_column.numeric_column("age"), params["age_boundaries"])
  ids = [wide_deep.embedded(_ids(name, count), count + 1,
                            params["id_embedding_dim"], params)
         for name, count in (("user_id", movielens_data.USERS),
                             ("item_id", movielens_data.ITEMS))]
  return ids + [
      tf.feature_column.embedding_column(age, dim),
      tf.feature_column.embedding_column(
          tf.feature_column.categorical_column_with_identity("gender", 2),
          dim),
      tf.feature_column.embedding_column(
          tf.feature_column.categorical_column_with_identity(
              "occupation", len(movielens_data.OCCUPATIONS)), dim),
      tf.feature_column.numeric_column(
          "genres", [len(movielens_data.GENRES)]),
      # Years 1922-1998 (0 unknown) as decades from 1990, about -7 to 1.
      tf.feature_column.numeric_column(
          "release_year", normalizer_fn=lambda year: (year - 1990.0) / 10.0),
  ]


def bias_columns():
  """One weight per user and per movie."""
  return [tf.feature_column.embedding_column(
      _ids(name, count), 1, combiner="sum",
      initializer=tf.keras.initializers.Zeros())
          for name, count in (("user_id", movielens_data.USERS),
                              ("item_id", movielens_data.ITEMS))]


@es.register
class MovieLens(wide_deep.WideDeep):
  """Clicks (rating >= 4) on MovieLens-100k: id embeddings plus features."""

  name = "movielens"

  def default_hparams(self):
    """See base class."""
    return dict(DEFAULT_HPARAMS)

  def logits(self, features, training, params):
    """See base class: the MLP's output plus the user's and movie's bias."""
    deep = wide_deep.deep_logit(features, deep_columns(params),
                                params["hidden_units"])
    with es.linear_part():
      biases = tf.keras.layers.DenseFeatures(bias_columns(),
                                             name="biases")(features)
    return deep + tf.reduce_sum(biases, axis=1, keepdims=True)

  def feature_spec(self):
    """See base class: every feature present in every record."""
    spec = {name: tf.io.FixedLenFeature(tensor.shape, tensor.dtype)
            for name, tensor in self.serving_features().items()}
    spec[movielens_data.LABEL] = self.label_feature()
    return spec

  def serving_features(self):
    """See base class: the ids, the user's and the movie's features."""
    return {"user_id": tf.TensorSpec([1], tf.int64),
            "item_id": tf.TensorSpec([1], tf.int64),
            "age": tf.TensorSpec([1], tf.float32),
            "gender": tf.TensorSpec([1], tf.int64),
            "occupation": tf.TensorSpec([1], tf.int64),
            "release_year": tf.TensorSpec([1], tf.float32),
            "genres": tf.TensorSpec([len(movielens_data.GENRES)],
                                    tf.float32)}

  def input_fn(self, mode, global_batch_size, params, topology=None,
               accumulation_steps=1):
    """See base class: 80,000 ratings to train, the 20,000 held out to
    evaluate."""
    training = mode == tf.estimator.ModeKeys.TRAIN
    return es.inputs.from_tfrecords(
        movielens_data.tfrecord_pattern("train" if training else "test"),
        self.feature_spec(), movielens_data.LABEL, global_batch_size,
        training=training, topology=topology,
        accumulation_steps=accumulation_steps)

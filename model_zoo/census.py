"""Wide & deep on the UCI census data, with the census tutorial's columns.

TensorFlow's wide & deep tutorial (tensorflow/models, official/wide_deep)
predicts whether a person earns more than 50K a year. Its wide part weighs
the categorical columns, the age in buckets, and two crossed columns
(education x occupation, age bucket x education x occupation); its deep
part reads the numbers, the small vocabularies one-hot and the occupation as
an 8-wide embedding of its hashed value. Both are here: `census`, a
registered model trained through the framework's pipeline, and
`canned_estimator`, TF's own DNNLinearCombinedClassifier over the same
columns, for `es.make_estimator`.

The data (`census_data`) holds each category as its vocabulary index, so
the vocabulary columns are identity columns over those indices and the
crosses hash pairs of indices. Capital gains and losses (0 to 99,999) reach
the deep part as log(1 + x), keeping its inputs within a few units; the
tutorial feeds them raw.
"""
import tensorflow as tf

import estimator_scale as es
from model_zoo import census_data
from model_zoo import wide_deep

DEFAULT_HPARAMS = {"hidden_units": [100, 75, 50, 25], "embedding_dim": 8,
                   "hash_bucket_size": 1000, "cross_bucket_size": 1000,
                   "age_boundaries": [18, 25, 30, 35, 40, 45, 50, 55, 60, 65]}


def _vocabulary_column(name):
  return tf.feature_column.categorical_column_with_identity(
      name, len(census_data.VOCABULARIES[name]))


def wide_columns(params):
  """Categorical columns, age buckets, and the two crossed columns.

  The occupation is hashed (as the tutorial shows hashing); a cross takes
  categorical columns but not hashed ones, so the crosses read the
  occupation's index and hash the combination.
  """
  age_buckets = tf.feature_column.bucketized_column(
      tf.feature_column.numeric_column("age"), params["age_boundaries"])
  occupation = tf.feature_column.categorical_column_with_hash_bucket(
      "occupation", params["hash_bucket_size"], dtype=tf.int64)
  base = [_vocabulary_column(name) for name in
          ("education", "marital_status", "relationship", "workclass")]
  crossed = [
      tf.feature_column.crossed_column(
          [_vocabulary_column("education"), _vocabulary_column("occupation")],
          params["cross_bucket_size"]),
      tf.feature_column.crossed_column(
          [age_buckets, _vocabulary_column("education"),
           _vocabulary_column("occupation")], params["cross_bucket_size"]),
  ]
  return base + [occupation, age_buckets] + crossed


def deep_columns(params):
  """The numbers, one-hot vocabularies and the occupation's embedding."""
  numeric = [tf.feature_column.numeric_column(name) for name in
             ("age", "education_num", "hours_per_week")]
  numeric += [tf.feature_column.numeric_column(
      name, normalizer_fn=tf.math.log1p)
              for name in ("capital_gain", "capital_loss")]
  one_hot = [tf.feature_column.indicator_column(_vocabulary_column(name))
             for name in ("workclass", "education", "marital_status",
                          "relationship")]
  occupation = tf.feature_column.embedding_column(
      tf.feature_column.categorical_column_with_hash_bucket(
          "occupation", params["hash_bucket_size"], dtype=tf.int64),
      params["embedding_dim"])
  return numeric + one_hot + [occupation]


@es.register
class Census(wide_deep.WideDeep):
  """Wide & deep on the UCI census data (the TF census tutorial's columns)."""

  name = "census"

  def default_hparams(self):
    """See base class."""
    return dict(DEFAULT_HPARAMS)

  def logits(self, features, training, params):
    """See base class: the wide part's weighted ids plus the deep part."""
    return wide_deep.logits(features, wide_columns(params),
                            deep_columns(params), params["hidden_units"])

  def feature_spec(self):
    """See base class: one number per column, the label included."""
    spec = {name: tf.io.FixedLenFeature([1], tensor.dtype)
            for name, tensor in self.serving_features().items()}
    spec[census_data.LABEL] = self.label_feature()
    return spec

  def serving_features(self):
    """See base class: the numbers, and each category's index."""
    specs = {name: tf.TensorSpec([1], tf.float32)
             for name in census_data.NUMERIC}
    specs.update({name: tf.TensorSpec([1], tf.int64)
                  for name in census_data.CATEGORICAL})
    return specs

  def input_fn(self, mode, global_batch_size, params, topology=None,
               accumulation_steps=1):
    """See base class: UCI's adult.data to train, adult.test to evaluate."""
    training = mode == tf.estimator.ModeKeys.TRAIN
    return es.inputs.from_tfrecords(
        census_data.tfrecord_pattern("train" if training else "test"),
        self.feature_spec(), census_data.LABEL, global_batch_size,
        training=training, topology=topology,
        accumulation_steps=accumulation_steps)


def canned_estimator(scale_config, params=None, linear_learning_rate=0.1,
                     dnn_learning_rate=0.05, lr_scaling="identity"):
  """TF's canned wide & deep over the census columns, for `es.make_estimator`.

  Args:
    scale_config: the job's `build_run_config` result: the Estimator is
      made with its RunConfig and its optimizers reduce as its backend does.
    params: overrides of `DEFAULT_HPARAMS`.
    linear_learning_rate: FTRL's rate for the wide part (S = 1).
    dnn_learning_rate: Adagrad's rate for the deep part (S = 1).
    lr_scaling: how both rates grow with the replicas (`es.canned_optimizer`).

  Returns:
    A `tf.estimator.DNNLinearCombinedClassifier`.
  """
  params = dict(DEFAULT_HPARAMS, **(params or {}))
  return wide_deep.canned(scale_config, wide_columns(params),
                          deep_columns(params), params["hidden_units"],
                          linear_learning_rate, dnn_learning_rate, lr_scaling)


def input_fn(mode, global_batch_size, topology=None):
  """The canned estimator's input: features and 0/1 labels by split."""
  model = Census()
  return model.input_fn(mode, global_batch_size, model.default_hparams(),
                        topology=topology)


def serving_input_receiver_fn():
  """The canned estimator's export input: serialized tf.train.Examples."""
  spec = Census().feature_spec()
  spec.pop(census_data.LABEL)
  return tf.estimator.export.build_parsing_serving_input_receiver_fn(spec)

"""Wide & deep over feature columns on Criteo-shaped click logs (click_data).

Two ways to train the same model, as Estimator users do: `wide_deep`, a
registered model whose network reads the feature columns (trained through
the framework's pipeline, with accumulation and AdaScale like any model),
and `canned_estimator`, TF's own DNNLinearCombinedClassifier over the same
columns (FTRL for the wide part, Adagrad for the deep part: the canned
defaults), trained through `es.make_estimator`.

The wide part reads every categorical column hashed into buckets, plus the
cross of the two columns whose ids act only together; the deep part reads
the same hashed columns as embeddings and the counts as log(1 + count).
Both exports take serialized tf.train.Examples and parse them with the
columns' parse spec, as the records on disk are parsed.

By default every column hashes into `hash_bucket_size` buckets. With
`vocabulary_sizes` (a preset such as `criteo`, or 26 sizes joined by ':'
in `--hparams`), the click logs draw each column's ids from its own
vocabulary, with Zipf exponent `zipf_exponent`, and each column hashes into
as many buckets as it has ids: tables of Criteo's sizes.

`embedding=dynamic` gives the deep part dynamic tables instead (each id its
own row, as many rows as the column's buckets, `min_count` and
`steps_to_live` as `es.dynamic_embedding`'s; 0 leaves rows until the table
is full); the wide part stays hashed.

`raw_ids=1` trains on click logs of 63-bit ids without a vocabulary
(`click_data`'s `raw_ids`; `vocabulary_sizes` "" is then its
`RAW_VOCABULARY`): every column hashes into, or holds in its dynamic table,
`hash_bucket_size` rows.

`train_rows` and `eval_rows` set the splits' examples (0: click_data's
60,000 and 5,000).
"""
import tensorflow as tf

import estimator_scale as es
from model_zoo import click_data

DEFAULT_HPARAMS = {"hidden_units": [64, 32], "embedding_dim": 8,
                   "hash_bucket_size": 1000, "cross_bucket_size": 100,
                   "vocabulary_sizes": "", "embedding": "hashed",
                   "min_count": 1, "steps_to_live": 0, "raw_ids": 0,
                   "zipf_exponent": click_data.ZIPF_EXPONENT, "data_seed": 0,
                   "train_rows": 0, "eval_rows": 0}


def vocabulary(params):
  """The click logs' vocabulary per column; ConfigError naming the hparam."""
  if params["raw_ids"] not in (0, 1):
    raise es.errors.ConfigError(
        f"hparams: raw_ids={params['raw_ids']!r}: valid: 0 (hashed 31-bit "
        "ids) or 1 (63-bit ids without a vocabulary)")
  if params["raw_ids"] and not params["vocabulary_sizes"]:
    return click_data.RAW_VOCABULARY
  try:
    return click_data.vocabulary_sizes(params["vocabulary_sizes"])
  except ValueError as e:
    raise es.errors.ConfigError(f"hparams: {e}") from None


def buckets(params):
  """Buckets of each categorical column: `hash_bucket_size` each, or its
  vocabulary's size where `vocabulary_sizes` is given without `raw_ids`."""
  if not params["vocabulary_sizes"] or params["raw_ids"]:
    return [params["hash_bucket_size"]] * len(click_data.CATEGORICAL)
  return list(vocabulary(params))


def click_logs(split, params):
  """The glob of the click logs `params` describe (written if missing)."""
  try:
    return click_data.tfrecord_pattern(split, params["data_seed"],
                                       vocabulary=vocabulary(params),
                                       zipf_exponent=params["zipf_exponent"],
                                       raw_ids=bool(params["raw_ids"]),
                                       train_rows=params["train_rows"] or None,
                                       eval_rows=params["eval_rows"] or None)
  except ValueError as e:
    raise es.errors.ConfigError(f"hparams: {e}") from None


def categorical_columns(params):
  """Each categorical column's hashed ids, in its `buckets`."""
  return [tf.feature_column.categorical_column_with_hash_bucket(
      name, size, dtype=tf.int64)
          for name, size in zip(click_data.CATEGORICAL, buckets(params))]


def wide_columns(params):
  """What the wide (linear) part weighs: hashed ids and the crossed pair.

  A cross takes integer ids only through a categorical column (its string
  keys mean string features); the ids are below 2^31, so the identity
  column hands them over unchanged and the cross hashes the pairs.
  """
  crossed = tf.feature_column.crossed_column(
      [tf.feature_column.categorical_column_with_identity(name, 2**31)
       for name in click_data.CROSSED], params["cross_bucket_size"])
  return categorical_columns(params) + [crossed]


def deep_columns(params):
  """What the deep part reads: embedded ids and log counts.

  A missing count reads as 0, as in most Criteo pipelines.
  """
  numeric = [tf.feature_column.numeric_column(name, default_value=0.0,
                                              normalizer_fn=tf.math.log1p)
             for name in click_data.NUMERIC]
  return numeric + [embedded(column, size, params["embedding_dim"], params)
                    for column, size in zip(categorical_columns(params),
                                            buckets(params))]


EMBEDDINGS = ("hashed", "dynamic")


def embedded(column, rows, dimension, params):
  """The embedding of one categorical column of `rows` ids, as the hparams
  `embedding`, `min_count` and `steps_to_live` say."""
  if params["embedding"] == "hashed":
    return tf.feature_column.embedding_column(column, dimension)
  if params["embedding"] != "dynamic":
    raise es.errors.ConfigError(
        f"hparams: embedding={params['embedding']!r} is unknown; valid: "
        f"{', '.join(EMBEDDINGS)}")
  return es.dynamic_embedding_column(
      column, dimension, capacity=rows,
      min_count=params["min_count"],
      steps_to_live=params["steps_to_live"] or None)


def parse_spec():
  """{name: tf.io parse feature} of one record, the label included.

  The columns' own spec (hashed ids as VarLenFeature, so an id may be
  missing); it does not depend on bucket sizes or dimensions.
  """
  spec = tf.feature_column.make_parse_example_spec(
      wide_columns(DEFAULT_HPARAMS) + deep_columns(DEFAULT_HPARAMS))
  spec[click_data.LABEL] = WideDeep().label_feature()
  return spec


@es.register
class WideDeep(es.BinaryClassifierModel):
  """Wide & deep over feature columns on generated Criteo-shaped clicks.

  A binary classifier: log loss, the click probability (`logistic`), AUC
  and the other click metrics come from `es.BinaryClassifierModel`.
  """

  name = "wide_deep"
  serving_examples = True

  def default_hparams(self):
    """See base class."""
    return dict(DEFAULT_HPARAMS)

  def logits(self, features, training, params):
    """See base class: the wide part's weighted ids plus the deep part."""
    return logits(features, wide_columns(params), deep_columns(params),
                  params["hidden_units"])

  def feature_spec(self):
    """See base class: the columns' parse spec (ids may be missing)."""
    return parse_spec()

  def serving_features(self):
    """See base class: one count or id per column."""
    specs = {name: tf.TensorSpec([1], tf.float32)
             for name in click_data.NUMERIC}
    specs.update({name: tf.TensorSpec([1], tf.int64)
                  for name in click_data.CATEGORICAL})
    return specs

  def input_fn(self, mode, global_batch_size, params, topology=None,
               accumulation_steps=1):
    """See base class."""
    training = mode == tf.estimator.ModeKeys.TRAIN
    return es.inputs.from_tfrecords(
        click_logs("train" if training else "eval", params),
        self.feature_spec(), click_data.LABEL, global_batch_size,
        training=training, topology=topology,
        accumulation_steps=accumulation_steps, seed=params["data_seed"])


def canned_estimator(scale_config, params=None, linear_learning_rate=0.5,
                     dnn_learning_rate=0.5, lr_scaling="identity"):
  """TF's canned wide & deep over the same columns, for `es.make_estimator`.

  Args:
    scale_config: the job's `build_run_config` result: the Estimator is
      made with its RunConfig and its optimizers reduce as its backend does.
    params: overrides of `DEFAULT_HPARAMS` (columns and hidden units).
    linear_learning_rate: FTRL's rate for the wide part (S = 1).
    dnn_learning_rate: Adagrad's rate for the deep part (S = 1).
    lr_scaling: how both rates grow with the replicas (`es.canned_optimizer`).

  Returns:
    A `tf.estimator.DNNLinearCombinedClassifier`.
  """
  params = dict(DEFAULT_HPARAMS, **(params or {}))
  return canned(scale_config, wide_columns(params), deep_columns(params),
                params["hidden_units"], linear_learning_rate,
                dnn_learning_rate, lr_scaling)


def logits(features, wide, deep, hidden_units):
  """Wide & deep's logit, [batch, 1]: the deep tower's plus the wide part's.

  The wide part's weights are one-wide embeddings summed over the ids, a
  linear model over the categorical columns whose gradients stay sparse.
  """
  with es.linear_part():
    weights = tf.keras.layers.DenseFeatures(
        [tf.feature_column.embedding_column(
            column, 1, combiner="sum",
            initializer=tf.keras.initializers.Zeros())
         for column in wide], name="wide")(features)
  deep_part = deep_logit(features, deep, hidden_units)
  with es.linear_part():
    bias = tf.keras.layers.Dense(1, name="wide_logit")(
        tf.reduce_sum(weights, axis=1, keepdims=True))
  return deep_part + bias


def deep_logit(features, columns, hidden_units):
  """The deep tower: dense features through ReLU layers to one logit."""
  net = tf.keras.layers.DenseFeatures(columns, name="deep")(features)
  for i, units in enumerate(hidden_units):
    net = tf.keras.layers.Dense(units, activation="relu",
                                name=f"hidden{i}")(net)
  return tf.keras.layers.Dense(1, name="deep_logit")(net)


def canned(scale_config, wide, deep, hidden_units, linear_learning_rate,
           dnn_learning_rate, lr_scaling):
  """`tf.estimator.DNNLinearCombinedClassifier` over `wide` and `deep`
  columns, its FTRL and Adagrad scaled by `es.canned_optimizer`."""
  return tf.estimator.DNNLinearCombinedClassifier(
      linear_feature_columns=wide,
      linear_optimizer=es.canned_optimizer(
          tf.keras.optimizers.legacy.Ftrl(linear_learning_rate), scale_config,
          lr_scaling=lr_scaling),
      dnn_feature_columns=deep,
      dnn_hidden_units=hidden_units,
      dnn_optimizer=es.canned_optimizer(
          tf.keras.optimizers.legacy.Adagrad(dnn_learning_rate),
          scale_config, lr_scaling=lr_scaling),
      config=scale_config.run_config)


def serving_input_receiver_fn():
  """The canned estimator's export input: serialized tf.train.Examples."""
  spec = parse_spec()
  spec.pop(click_data.LABEL)
  return tf.estimator.export.build_parsing_serving_input_receiver_fn(spec)

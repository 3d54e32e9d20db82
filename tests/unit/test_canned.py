"""Canned estimators and hand-written model_fns of every signature through
`make_estimator`, the optimizer factory's refusals, and the wide & deep
zoo model's data and exports (one process;
tests/integration/test_canned_multiprocess.py has the backends)."""
import functools
import os

import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale import canned
from estimator_scale.embeddings import sharded
from model_zoo import click_data
from model_zoo import digits_data
from model_zoo import wide_deep
from tests.workers import horovod_example

ModeKeys = tf.estimator.ModeKeys


@pytest.fixture(scope="module")
def digits():
  (train_x, train_y), (test_x, test_y) = digits_data.load_split()
  return ({"x": train_x.reshape(-1, 64)}, train_y,
          {"x": test_x.reshape(-1, 64)}, test_y)


def _scale_config(tmp_path, distribution="none"):
  return es.build_run_config(distribution, model_dir=str(tmp_path / "model"),
                             random_seed=0)


def _train_and_evaluate(estimator, digits, steps, batch=64):
  train_x, train_y, test_x, test_y = digits
  estimator.train(es.inputs.from_arrays(train_x, train_y, batch,
                                        topology=estimator.topology),
                  max_steps=steps)
  return estimator.evaluate(es.inputs.from_arrays(test_x, test_y, 120,
                                                  training=False))


# Hand-written model_fns: every argument list tf.estimator accepts.

TRAINING = es.TrainingConfig(optimizer="momentum",
                             learning_rate=0.05)


def _spec(features, labels, mode, topology, units=32):
  """The body every signature below shares."""
  def network(micro_features):
    hidden = tf.keras.layers.Dense(units, activation="relu", name="hidden")
    return tf.keras.layers.Dense(10, name="logits")(
        hidden(micro_features["x"]))

  def loss(logits, micro_labels):
    return tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
        micro_labels, logits, from_logits=True))

  if mode == ModeKeys.TRAIN:
    train = es.build_train_op(lambda f, l: loss(network(f), l), features,
                              labels, TRAINING, topology)
    return tf.estimator.EstimatorSpec(mode, loss=train.loss,
                                      train_op=train.train_op)
  logits = network(features)
  accuracy = tf.keras.metrics.Accuracy(name="accuracy")
  accuracy.update_state(labels, tf.argmax(logits, 1))
  return tf.estimator.EstimatorSpec(
      mode, loss=loss(logits, labels), eval_metric_ops={"accuracy": accuracy})


class _Method:
  """A model_fn that is a bound method (self is not an argument)."""

  def __init__(self, topology):
    self.topology = topology

  def model_fn(self, features, labels, mode, params):
    return _spec(features, labels, mode, self.topology, params["units"])


def _model_fns(topology, model_dir):
  """(name, model_fn, hparams) for each signature."""
  def check_config(config):
    assert config.model_dir == model_dir  # the backend's RunConfig

  def plain(features, labels, mode):
    return _spec(features, labels, mode, topology)

  def with_params(features, labels, mode, params):
    return _spec(features, labels, mode, topology, params["units"])

  def with_config(features, labels, mode, config):
    check_config(config)
    return _spec(features, labels, mode, topology)

  def with_both(features, labels, mode, params, config):
    check_config(config)
    return _spec(features, labels, mode, topology, params["units"])

  def reordered(features, mode, config, labels, params):
    check_config(config)
    return _spec(features, labels, mode, topology, params["units"])

  def with_extra(features, labels, mode, units):
    return _spec(features, labels, mode, topology, units)

  return [
      ("features, labels, mode", plain, None),
      ("+ params", with_params, {"units": 16}),
      ("+ config", with_config, None),
      ("+ params, config", with_both, {"units": 16}),
      ("reordered", reordered, {"units": 16}),
      ("bound method", _Method(topology).model_fn, {"units": 16}),
      ("functools.partial", functools.partial(with_extra, units=16), None),
      # Given the config make_estimator gets, as the example's main does:
      # build_train_op refuses any other.
      ("Horovod's example", horovod_example.make_cnn_model_fn(
          TRAINING, topology), None),
  ]


SIGNATURES = [name for name, _, _ in _model_fns(None, None)]


@pytest.mark.parametrize("signature", SIGNATURES)
def test_every_model_fn_signature_trains_through_make_estimator(
    signature, digits, tmp_path):
  scale_config = _scale_config(tmp_path)
  model_fn, hparams = {name: (fn, hp) for name, fn, hp in _model_fns(
      scale_config.topology, str(tmp_path / "model"))}[signature]
  estimator = es.make_estimator(model_fn, scale_config=scale_config,
                                training_config=TRAINING, hparams=hparams)
  metrics = _train_and_evaluate(estimator, digits, steps=60)
  assert metrics["global_step"] == 60
  assert metrics["accuracy"] > 0.5, metrics


def test_hparams_need_a_params_argument(tmp_path):
  def model_fn(features, labels, mode):
    del features, labels, mode
  with pytest.raises(es.errors.UsageError, match="no `params` argument"):
    es.make_estimator(model_fn, scale_config=_scale_config(tmp_path),
                      hparams={"units": 8})


def test_a_model_fn_without_features_is_refused(tmp_path):
  with pytest.raises(es.errors.UsageError, match="`features` argument"):
    es.make_estimator(lambda config: None,
                      scale_config=_scale_config(tmp_path))


# Canned estimators.

def _canned(kind, scale_config, lr_scaling="identity"):
  columns = [tf.feature_column.numeric_column("x", [64])]
  ftrl = es.canned_optimizer(tf.keras.optimizers.legacy.Ftrl(0.5),
                             scale_config, lr_scaling=lr_scaling)
  adagrad = es.canned_optimizer(tf.keras.optimizers.legacy.Adagrad(0.1),
                                scale_config, lr_scaling=lr_scaling)
  if kind == "DNNClassifier":
    return tf.estimator.DNNClassifier([32], columns, n_classes=10,
                                      optimizer=adagrad,
                                      config=scale_config.run_config)
  if kind == "LinearClassifier":
    return tf.estimator.LinearClassifier(columns, n_classes=10,
                                         optimizer=ftrl,
                                         config=scale_config.run_config)
  return tf.estimator.DNNLinearCombinedClassifier(
      linear_feature_columns=columns, linear_optimizer=ftrl,
      dnn_feature_columns=columns, dnn_optimizer=adagrad,
      dnn_hidden_units=[32], n_classes=10, config=scale_config.run_config)


@pytest.mark.parametrize("kind", ["DNNClassifier", "LinearClassifier",
                                  "DNNLinearCombinedClassifier"])
def test_canned_estimators_train_through_make_estimator(kind, digits,
                                                        tmp_path):
  scale_config = _scale_config(tmp_path)
  estimator = es.make_estimator(_canned(kind, scale_config, "adascale"),
                                scale_config=scale_config)
  metrics = _train_and_evaluate(estimator, digits, steps=100)
  assert metrics["global_step"] == 100
  assert metrics["accuracy"] > 0.85, metrics
  # One process: S = 1, so AdaScale's gain is exactly 1 for every part.
  names = estimator.get_variable_names()
  assert estimator.get_variable_value(es.ADASCALE_GAIN) == 1.0
  assert ("adascale/Ftrl/gain" in names) == (
      kind == "DNNLinearCombinedClassifier")


@pytest.mark.parametrize("optimizer,names", [
    (tf.keras.optimizers.Adam(0.01), "tf.keras.optimizers.legacy.Adam"),
    (tf.compat.v1.train.AdagradOptimizer(0.1), "tf.keras.optimizers.legacy"),
    ("momentum", "Adagrad, Adam, Ftrl, RMSProp, SGD"),
    (lambda: tf.keras.optimizers.legacy.SGD(0.1), "the optimizer itself"),
])
def test_optimizers_canned_estimators_refuse_get_one_line(optimizer, names):
  with pytest.raises(es.errors.ConfigError) as raised:
    es.canned_optimizer(optimizer, es.Topology())
  assert names in str(raised.value) and "\n" not in str(raised.value)


def test_canned_optimizer_checks_what_the_topology_can_run():
  with pytest.raises(es.errors.ConfigError, match="at least 2 gradient"):
    es.canned_optimizer("Adagrad", es.Topology(), lr_scaling="adascale",
                        batch_scale=4)
  with pytest.raises(es.errors.ConfigError, match="allreduce_compression"):
    es.canned_optimizer("Adagrad", es.Topology(),
                        allreduce_compression="fp16")


def test_an_estimator_must_be_made_with_the_backends_run_config(tmp_path):
  scale_config = _scale_config(tmp_path)
  columns = [tf.feature_column.numeric_column("x", [64])]
  optimizer = es.canned_optimizer("Ftrl", scale_config)
  own = tf.estimator.LinearClassifier(columns, optimizer=optimizer,
                                      model_dir=str(tmp_path / "other"))
  with pytest.raises(es.errors.ConfigError,
                     match=r"model_dir.* differ\): make it with config="):
    es.make_estimator(own, scale_config=scale_config)
  made = tf.estimator.LinearClassifier(columns, optimizer=optimizer,
                                       config=scale_config.run_config)
  with pytest.raises(es.errors.UsageError, match="needs scale_config="):
    es.make_estimator(made)
  with pytest.raises(es.errors.UsageError, match="training_config"):
    es.make_estimator(made, scale_config=scale_config,
                      training_config=TRAINING)
  # Made anew around the canned model_fn, so that its variables are placed.
  wrapped = es.make_estimator(made, scale_config=scale_config).tf_estimator
  assert wrapped.config.model_dir == made.config.model_dir


def test_the_optimizer_applies_only_through_get_updates(tmp_path):
  optimizer = es.canned_optimizer("SGD", _scale_config(tmp_path))
  with tf.Graph().as_default():
    variable = tf.Variable(1.0)
    with pytest.raises(es.errors.UsageError, match="get_updates"):
      optimizer().apply_gradients([(tf.constant(1.0), variable)])


# Canned estimators, k micro-batches per update.

def _wide_deep_on_digits(tmp_path, k, lr_scaling="identity"):
  """A DNNLinearCombined over dense digits and a hashed id (sparse rows)."""
  scale_config = _scale_config(tmp_path / f"k{k}-{lr_scaling}")
  dense = [tf.feature_column.numeric_column("x", [64])]
  ids = [tf.feature_column.categorical_column_with_hash_bucket(
      "id", 16, dtype=tf.int64)]
  make = functools.partial(es.canned_optimizer, topology=scale_config,
                           accumulation_steps=k, lr_scaling=lr_scaling)
  return es.make_estimator(tf.estimator.DNNLinearCombinedClassifier(
      linear_feature_columns=dense + ids,
      linear_optimizer=make(tf.keras.optimizers.legacy.Ftrl(0.2)),
      dnn_feature_columns=dense + [
          tf.feature_column.embedding_column(ids[0], 4)],
      dnn_optimizer=make(tf.keras.optimizers.legacy.Adagrad(0.1)),
      dnn_hidden_units=[16], n_classes=10, config=scale_config.run_config),
                            scale_config=scale_config)


def _train_digits(estimator, digits, k, steps=8, batch=32):
  train_x, train_y, _, _ = digits
  features = dict(train_x, id=(train_y[:, None] * 7) % 5)
  estimator.train(es.inputs.from_arrays(
      features, train_y, batch, topology=estimator.topology,
      accumulation_steps=k), max_steps=steps)
  return {name: estimator.get_variable_value(name)
          for name in estimator.get_variable_names()}


def test_canned_accumulation_equals_the_whole_batch(digits, tmp_path):
  whole = _train_digits(_wide_deep_on_digits(tmp_path, 1), digits, 1)
  four = _train_digits(_wide_deep_on_digits(tmp_path, 4), digits, 4)
  assert four["global_step"] == whole["global_step"] == 8
  counted = "accumulation/micro_batches"
  assert four[counted] == 32 and whole[counted] == 8
  # The same names: the slots included, so a checkpoint restarts at any k.
  assert sorted(four) == sorted(whole)
  assert any(name.endswith("Ftrl/linear/linear_model/id/weights/accumulator")
             for name in whole)
  for name in set(whole) - {counted}:
    np.testing.assert_allclose(four[name], whole[name], atol=1e-5,
                               err_msg=name)


def test_canned_adascale_scales_with_the_micro_batches(digits, tmp_path):
  held = _train_digits(_wide_deep_on_digits(tmp_path, 4, "adascale"),
                       digits, 4)
  for part in ("adascale", "adascale/Ftrl"):  # each part its own estimates
    assert held[f"{part}/scale"] == 4.0
    assert 1.0 <= held[f"{part}/gain"] <= 4.0


def test_canned_accumulation_needs_one_k_and_make_estimator(tmp_path):
  scale_config = _scale_config(tmp_path)
  columns = [tf.feature_column.numeric_column("x", [64])]
  with pytest.raises(es.errors.ConfigError, match="accumulation_steps 2 and 4"):
    es.make_estimator(tf.estimator.DNNLinearCombinedClassifier(
        linear_feature_columns=columns, dnn_feature_columns=columns,
        linear_optimizer=es.canned_optimizer("Ftrl", scale_config,
                                             accumulation_steps=2),
        dnn_optimizer=es.canned_optimizer("Adagrad", scale_config,
                                          accumulation_steps=4),
        dnn_hidden_units=[8], config=scale_config.run_config),
                      scale_config=scale_config)
  with pytest.raises(es.errors.ConfigError, match="accumulation_steps=0"):
    es.canned_optimizer("SGD", scale_config, accumulation_steps=0)
  with pytest.raises(es.errors.ConfigError, match="clipnorm"):
    es.canned_optimizer(tf.keras.optimizers.legacy.SGD(clipnorm=1.0),
                        scale_config, accumulation_steps=2)
  optimizer = es.canned_optimizer("SGD", scale_config, accumulation_steps=2)
  with tf.Graph().as_default():
    variable = tf.Variable(1.0)
    with pytest.raises(es.errors.UsageError, match="es.make_estimator"):
      optimizer().get_updates(variable * 2.0, [variable])


# The click logs and the wide & deep model.

def test_click_logs_are_criteo_shaped_and_follow_the_seed():
  features, labels, probabilities = click_data.generate("eval", seed=0,
                                                        count=4000)
  again, _, _ = click_data.generate("eval", seed=0, count=4000)
  other, _, _ = click_data.generate("eval", seed=1, count=4000)
  assert sorted(features) == sorted(click_data.NUMERIC +
                                    click_data.CATEGORICAL)
  for name, values in features.items():
    np.testing.assert_array_equal(values, again[name])
  assert any(not np.array_equal(features[name], other[name])
             for name in click_data.CATEGORICAL)
  ids = features["C26"][features["C26"] >= 0]
  assert ids.max() < 2**31
  _, counts = np.unique(ids, return_counts=True)
  # Zipf: a head of frequent ids and a long tail seen once.
  assert counts.max() > 0.1 * len(ids) and np.mean(counts == 1) > 0.5
  assert 0.2 < labels.mean() < 0.3
  assert np.isnan(features["I1"]).mean() == pytest.approx(0.1, abs=0.03)
  assert 0.8 < click_data.auc(labels, probabilities) < 0.95


def _records(count):
  """The first serialized records of the eval split, with their labels."""
  pattern = click_data.tfrecord_pattern("eval")
  records = [r.numpy() for r in tf.data.TFRecordDataset(
      sorted(tf.io.gfile.glob(pattern))[0]).take(count)]
  return pattern, records


def _input_of(records):
  spec = wide_deep.parse_spec()
  spec.pop(click_data.LABEL)
  return lambda: tf.data.Dataset.from_tensor_slices(records).batch(
      len(records)).map(lambda batch: tf.io.parse_example(batch, spec))


def _serve(loaded, signature, **inputs):
  """`signature` of a loaded export (loading takes longer than serving: a
  test that calls several signatures loads its export once)."""
  return loaded.signatures[signature](**{
      k: tf.constant(v) for k, v in inputs.items()})


def _load(path):
  return tf.saved_model.load(os.fsdecode(path))


def test_wide_deep_exports_score_serialized_examples(tmp_path):
  model = wide_deep.WideDeep()
  estimator = es.make_estimator(model, model_dir=str(tmp_path / "zoo"),
                                random_seed=0)
  pattern, records = _records(50)
  # The files path, as the CLI's --train_data reads them.
  estimator.train(estimator.files_input_fn(
      click_data.tfrecord_pattern("train"), ModeKeys.TRAIN, 64), max_steps=20)
  predicted = next(estimator.predict(_input_of(records),
                                     yield_single_examples=False))
  path = estimator.export_saved_model(str(tmp_path / "export"))
  served = _serve(_load(path), "serving_default", examples=records)
  np.testing.assert_allclose(served["logistic"].numpy(),
                             predicted["logistic"], atol=1e-6)
  assert pattern.endswith("eval-*.tfrecord")


def test_canned_wide_deep_exports_score_serialized_examples(tmp_path):
  scale_config = _scale_config(tmp_path)
  estimator = es.make_estimator(wide_deep.canned_estimator(scale_config),
                                scale_config=scale_config)
  model = wide_deep.WideDeep()
  estimator.train(model.input_fn(ModeKeys.TRAIN, 64, model.default_hparams(),
                                 estimator.topology), max_steps=20)
  _, records = _records(50)
  predicted = next(estimator.predict(_input_of(records),
                                     yield_single_examples=False))
  path = estimator.export_saved_model(
      str(tmp_path / "export"), wide_deep.serving_input_receiver_fn())
  loaded = _load(path)
  served = _serve(loaded, "predict", examples=records)
  np.testing.assert_allclose(served["logistic"].numpy(),
                             predicted["logistic"], atol=1e-6)
  classified = _serve(loaded, "serving_default", inputs=records)
  np.testing.assert_allclose(classified["scores"].numpy()[:, 1],
                             predicted["logistic"][:, 0], atol=1e-6)


def test_a_canned_optimizer_refuses_a_sharded_table():
  """Only a dynamic table's part on a rank has a test holding a canned
  optimizer to one process's; a shard is what sharded_embedding puts in its
  collection on several Horovod ranks."""
  plan = es.canned_optimizer("SGD", es.build_run_config("none")).plan
  with tf.Graph().as_default():
    shard = tf.compat.v1.get_variable("clicks/embedding_weights", [4, 2])
    dense = tf.compat.v1.get_variable("dense", [2])
    canned._check_tables([dense], plan)  # pylint: disable=protected-access
    tf.compat.v1.add_to_collection(sharded.COLLECTION, shard)
    with pytest.raises(es.errors.UsageError,
                       match="sharded table clicks/embedding_weights"):
      canned._check_tables([dense, shard], plan)  # pylint: disable=protected-access

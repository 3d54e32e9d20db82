"""Accumulation builds the network once: any network style, label-free models,
state updates per micro-batch, a graph whose size does not depend on k, and
the drop-in `build_train_op` for hand-written model_fns (one process)."""
import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale import backends
from estimator_scale.train_ops import accumulation
from tests.helpers import trainer
from tests.helpers.results import max_difference
from tests.workers import tiny_models


def _weights(estimator):
  return {n: estimator.get_variable_value(n)
          for n in estimator.get_variable_names()
          if n.startswith("model/") and "/Momentum" not in n}


@pytest.mark.parametrize("case", ["mlp", "keras", "keras_model",
                                  "autoencoder", "feature_columns",
                                  "shared_embeddings", "lookup_tables"])
@pytest.mark.parametrize("lr_scaling", ["identity", "adascale"])
def test_micro_batches_equal_one_large_batch(case, lr_scaling, tmp_path):
  model, features, labels = tiny_models.generated_data(case, 64)
  accumulated = trainer.train(model, features, labels, tmp_path / "k4", 16,
                              10, learning_rate=0.05, optimizer="momentum",
                              accumulation_steps=4, lr_scaling=lr_scaling,
                              batch_scale=1.0)
  large = trainer.train(model, features, labels, tmp_path / "k1", 16, 10,
                        learning_rate=0.05, optimizer="momentum")
  assert max_difference(_weights(accumulated), _weights(large)) <= 1e-5
  assert accumulated.get_variable_value("global_step") == 10
  assert accumulated.get_variable_value("accumulation/micro_batches") == 40


# Each network style's two layers (tanh, then linear) by variable scope.
_LAYERS = {"keras": ("hidden", "out"),
           "keras_model": ("two_layers/hidden", "two_layers/out"),
           "autoencoder": ("encoder", "decoder")}


def _forward(estimator, layers, x):
  """The network's output on `x` in NumPy, from the trained variables."""
  value = lambda layer, name: estimator.get_variable_value(
      f"model/{layer}/{name}")
  first, second = layers
  hidden = np.tanh(x @ value(first, "kernel") + value(first, "bias"))
  return hidden @ value(second, "kernel") + value(second, "bias")


@pytest.mark.parametrize("case", ["keras", "keras_model", "autoencoder"])
def test_adascale_trains_every_network_style(case, tmp_path):
  model, features, labels = tiny_models.generated_data(case, 64)
  recorder = trainer.GainRecorder()
  estimator = trainer.train(model, features, labels, tmp_path / "a", 16, 5,
                            hooks=[recorder], learning_rate=0.05,
                            optimizer="momentum", accumulation_steps=4,
                            lr_scaling="adascale")
  gain = estimator.get_variable_value("adascale/gain")
  assert 1.0 <= gain <= 4.0
  # tau is the sum of the 5 updates' gains, each between 1 and S = 4.
  gains = recorder.gains
  assert len(gains) == 5 and gains[-1] == gain
  assert all(1.0 <= g <= 4.0 for g in gains)
  assert estimator.get_variable_value("adascale/progress") == pytest.approx(
      sum(gains), rel=1e-6)
  metrics = estimator.evaluate(trainer.array_input(features, labels, 16,
                                                   one_pass=True))
  assert np.isfinite(metrics["loss"])
  # One prediction per example, each the trained network's output on it.
  predictions = list(estimator.predict(trainer.array_input(
      features, labels, 16, one_pass=True)))
  expected = _forward(estimator, _LAYERS[case], features["x"])
  assert len(predictions) == len(expected)
  if case == "autoencoder":
    outputs = np.stack([p["outputs"] for p in predictions])
    assert outputs.shape == (64, 5)
    np.testing.assert_allclose(outputs, expected, atol=1e-5)
    return
  logits = np.stack([p["logits"] for p in predictions])
  assert logits.shape == (64, 3)
  np.testing.assert_allclose(logits, expected, atol=1e-5)
  # Classes and probabilities follow from those logits.
  classes = np.array([p["classes"] for p in predictions])
  np.testing.assert_array_equal(classes, np.argmax(logits, axis=1))
  assert set(classes) <= {0, 1, 2}
  probabilities = np.stack([p["probabilities"] for p in predictions])
  softmax = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
  np.testing.assert_allclose(probabilities, softmax, atol=1e-6)


class _Normalised(es.RegressionModel):
  """Keras batch norm on the input, momentum 0.5, then a linear layer."""

  def logits(self, features, training, params):
    net = tf.keras.layers.BatchNormalization(momentum=0.5, name="bn")(
        features["x"], training=training)
    return tf.keras.layers.Dense(1, name="out")(net)

  def serving_features(self):
    return {"x": tf.TensorSpec([2], tf.float32)}


def test_batch_norm_statistics_update_once_per_micro_batch(tmp_path):
  # Every example is (3, -1): each micro-batch's mean is that, so after n
  # moving-average steps of momentum 0.5 the moving mean is (1 - 0.5^n) x.
  x = np.tile(np.array([[3.0, -1.0]], np.float32), (32, 1))
  y = np.zeros((32, 1), np.float32)
  estimator = trainer.train(_Normalised(), {"x": x}, y, tmp_path / "bn", 16,
                            1, learning_rate=0.05, optimizer="sgd",
                            accumulation_steps=4)
  moving_mean = estimator.get_variable_value("model/bn/moving_mean")
  np.testing.assert_allclose(moving_mean, (1 - 0.5 ** 4) * x[0], rtol=1e-6)


def _graph_size(k, lr_scaling="adascale"):
  graph = tf.Graph()
  with graph.as_default():
    model_fn = es.make_model_fn(tiny_models.KerasMLP(), es.TrainingConfig(
        accumulation_steps=k, lr_scaling=lr_scaling))
    placeholder = tf.compat.v1.placeholder
    features = {"x": placeholder(tf.float32, [8 * k, 5]),
                "id": placeholder(tf.int64, [8 * k])}
    model_fn(features, placeholder(tf.int64, [8 * k]),
             tf.estimator.ModeKeys.TRAIN, {}, None)
    definition = graph.as_graph_def()
  return len(definition.node) + sum(len(f.node_def)
                                    for f in definition.library.function)


def test_graph_size_does_not_depend_on_accumulation_steps():
  assert _graph_size(2) == _graph_size(64)


def test_uneven_micro_batches_are_refused_naming_the_flag():
  with tf.Graph().as_default():
    model_fn = es.make_model_fn(tiny_models.KerasMLP(), es.TrainingConfig(
        accumulation_steps=4))
    with pytest.raises(ValueError, match="accumulation_steps=4 does not "
                       "divide the replica's batch of 10"):
      model_fn({"x": tf.zeros([10, 5]), "id": tf.zeros([10], tf.int64)},
               tf.zeros([10], tf.int64), tf.estimator.ModeKeys.TRAIN, {},
               None)


class _Summarised(tiny_models.KerasMLP):

  def logits(self, features, training, params):
    logits = super().logits(features, training, params)
    tf.compat.v1.summary.histogram("logits", logits)
    return logits


def test_summary_inside_the_network_is_reported_not_a_crash(tmp_path, caplog):
  model, features, labels = tiny_models.generated_data("keras", 32)
  trainer.train(_Summarised(), features, labels, tmp_path / "s", 16, 2,
                learning_rate=0.05, accumulation_steps=2)
  assert "'summaries' collection" in caplog.text and "logits" in caplog.text


def _handwritten_model_fn(training_config, topology):
  """A model_fn as TF's Estimator guide writes it, plus the drop-in call."""

  def model_fn(features, labels, mode, params):
    def network(x):
      net = tf.keras.layers.Dense(16, activation="tanh", name="hidden",
                                  kernel_initializer=tiny_models._glorot())(x)
      return tf.keras.layers.Dense(3, name="out",
                                   kernel_initializer=tiny_models._glorot())(
                                       net)

    def loss_fn(micro_features, micro_labels):
      logits = network(micro_features["x"])
      return tf.reduce_mean(
          tf.nn.sparse_softmax_cross_entropy_with_logits(micro_labels,
                                                         logits))

    if mode == tf.estimator.ModeKeys.TRAIN:
      train = es.build_train_op(loss_fn, features, labels, training_config,
                                topology)
      return tf.estimator.EstimatorSpec(mode, loss=train.loss,
                                        train_op=train.train_op)
    return tf.estimator.EstimatorSpec(mode, loss=loss_fn(features, labels))
  return model_fn


def test_handwritten_model_fn_matches_the_template(tmp_path):
  _, features, labels = tiny_models.generated_data("keras", 64)
  config = es.TrainingConfig(learning_rate=0.05,
                             accumulation_steps=4, lr_scaling="adascale",
                             optimizer="momentum")
  scale_config = es.build_run_config("none", model_dir=str(tmp_path / "hand"),
                                     random_seed=0)
  estimator = es.make_estimator(
      _handwritten_model_fn(config, scale_config.topology),
      scale_config=scale_config, training_config=config)
  estimator.train(trainer.array_input(features, labels, 16, 4), max_steps=10)
  template = trainer.train(tiny_models.KerasMLP(), features, labels,
                           tmp_path / "template", 16, 10, learning_rate=0.05,
                           optimizer="momentum", accumulation_steps=4,
                           lr_scaling="adascale")
  handwritten = {f"model/{n}": estimator.get_variable_value(n)
                 for n in estimator.get_variable_names()
                 if n.startswith(("hidden/", "out/")) and "/Momentum" not in n}
  assert max_difference(handwritten, _weights(template)) <= 1e-6
  assert estimator.get_variable_value("adascale/progress") == pytest.approx(
      template.get_variable_value("adascale/progress"))
  with pytest.raises(ValueError, match="pass your own input_fn"):
    estimator.model_input_fn(tf.estimator.ModeKeys.TRAIN, 16)


class _MaskedEmbedding(tiny_models.TinyEmbedding):
  """Looks up only token ids >= 5: a number of rows known only at run time."""

  def logits(self, features, training, params):
    table = tf.compat.v1.get_variable(
        "table", [20, 4],
        initializer=tf.compat.v1.random_normal_initializer(seed=2))
    tokens = features["tokens"]
    kept = tf.cast(tokens >= 5, tf.float32)[..., None]
    rows = tf.nn.embedding_lookup(table, tf.boolean_mask(tokens, tokens >= 5))
    looked_up = tf.scatter_nd(tf.where(tokens >= 5), rows,
                              tf.concat([tf.shape(tokens, tf.int64), [4]], 0))
    net = tf.reduce_sum(looked_up * kept, 1)
    return tf.keras.layers.Dense(3, name="out",
                                 kernel_initializer=tiny_models._glorot())(net)


@pytest.mark.parametrize("model", [tiny_models.TinyEmbedding(),
                                   _MaskedEmbedding()],
                         ids=["fixed_lookups", "ragged_lookups"])
def test_sparse_gradients_accumulate_exactly(model, tmp_path):
  _, features, labels = tiny_models.generated_data("embedding", 64)
  accumulated = trainer.train(model, features, labels, tmp_path / "k4", 16,
                              10, learning_rate=0.05, optimizer="adam",
                              accumulation_steps=4, lr_scaling="adascale",
                              batch_scale=1.0)
  large = trainer.train(model, features, labels, tmp_path / "k1", 16, 10,
                        learning_rate=0.05, optimizer="adam")
  weights = lambda e: {n: v for n, v in _weights(e).items() if "/Adam" not in n}
  assert max_difference(weights(accumulated), weights(large)) <= 1e-5


def test_micro_batches_of_dense_sparse_and_ragged_features():
  with tf.Graph().as_default(), tf.compat.v1.Session() as session:
    dense = tf.reshape(tf.range(12), [4, 3])
    sparse = tf.sparse.from_dense(dense)
    ragged = tf.ragged.constant([[0], [1, 1], [2, 2, 2], [3]])
    index = tf.constant(1)
    parts = session.run([accumulation._slice(t, index, 2)
                         for t in (dense, sparse, ragged)])
  np.testing.assert_array_equal(parts[0], [[6, 7, 8], [9, 10, 11]])
  np.testing.assert_array_equal(_dense(parts[1]), [[6, 7, 8], [9, 10, 11]])
  assert parts[2].to_list() == [[2, 2, 2], [3]]


def _dense(value):
  out = np.zeros(value.dense_shape, value.values.dtype)
  out[tuple(value.indices.T)] = value.values
  return out


def _graph_with(model_fn, batch, k):
  """Builds a TRAIN graph over a placeholder batch of unknown size."""
  graph = tf.Graph()
  with graph.as_default():
    features = {"x": tf.compat.v1.placeholder(tf.float32, [None, 5]),
                "id": tf.compat.v1.placeholder(tf.int64, [None])}
    labels = tf.compat.v1.placeholder(tf.int64, [None])
    spec = model_fn(features, labels, tf.estimator.ModeKeys.TRAIN, {}, None)
    feed = {features["x"]: np.zeros([batch, 5], np.float32),
            features["id"]: np.zeros([batch], np.int64),
            labels: np.zeros([batch], np.int64)}
  return graph, spec, feed


def test_batch_size_known_only_at_run_time_is_checked():
  model_fn = es.make_model_fn(tiny_models.KerasMLP(), es.TrainingConfig(
      accumulation_steps=4))
  graph, spec, feed = _graph_with(model_fn, 10, 4)
  with graph.as_default(), tf.compat.v1.Session() as session:
    session.run(tf.compat.v1.global_variables_initializer())
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="accumulation_steps=4 does not divide"):
      session.run(spec.train_op, feed)
    feed = {t: np.concatenate([v, v[:2]]) for t, v in feed.items()}
    session.run(spec.train_op, feed)  # 12 examples: 4 micro-batches of 3


class _Float64Loss(tiny_models.KerasMLP):

  def loss(self, labels, logits, params):
    return tf.cast(tf.reshape(super().loss(labels, logits, params), [1]),
                   tf.float64)


def test_loss_of_another_dtype_or_shape_one_trains(tmp_path):
  model, features, labels = tiny_models.generated_data("keras", 32)
  estimator = trainer.train(_Float64Loss(), features, labels,
                            tmp_path / "f64", 16, 2, learning_rate=0.05,
                            accumulation_steps=4)
  assert estimator.get_variable_value("global_step") == 2


def test_handwritten_model_fn_inside_a_scope_keeps_its_names(tmp_path):
  _, features, labels = tiny_models.generated_data("keras", 64)
  config = es.TrainingConfig(accumulation_steps=4)
  scale_config = es.build_run_config("none", model_dir=str(tmp_path / "m"))
  inner = _handwritten_model_fn(config, scale_config.topology)

  def model_fn(features, labels, mode, params):
    with tf.compat.v1.variable_scope("net"):
      return inner(features, labels, mode, params)

  estimator = es.make_estimator(model_fn, scale_config=scale_config,
                                training_config=config)
  estimator.train(trainer.array_input(features, labels, 16, 4), max_steps=2)
  assert "net/hidden/kernel" in estimator.get_variable_names()
  metrics = estimator.evaluate(trainer.array_input(features, labels, 16,
                                                   one_pass=True))
  assert np.isfinite(metrics["loss"])


def test_restart_with_accumulation_from_a_checkpoint_without(tmp_path):
  model, features, labels = tiny_models.generated_data("keras", 64)
  trainer.train(model, features, labels, tmp_path / "r", 16, 2,
                learning_rate=0.05, lr_scaling="adascale")
  restarted = trainer.train(model, features, labels, tmp_path / "r", 16, 4,
                            learning_rate=0.05, accumulation_steps=4,
                            lr_scaling="adascale")
  assert restarted.get_variable_value("global_step") == 4
  assert restarted.get_variable_value("accumulation/micro_batches") == 2 + 8


def test_a_model_class_instead_of_an_instance_is_refused():
  with pytest.raises(TypeError, match=r"pass KerasMLP\(\), not the class"):
    es.make_estimator(tiny_models.KerasMLP)


def test_topology_of_another_backend_is_refused():
  strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
  with tf.Graph().as_default(), strategy.scope():
    model_fn = es.make_model_fn(tiny_models.KerasMLP(), topology=es.Topology(
        backend=backends.get("mirrored"), replicas_per_worker=2))
    features = {"x": tf.zeros([8, 5]), "id": tf.zeros([8], tf.int64)}
    with pytest.raises(ValueError, match="does not match the running job"):
      strategy.extended.call_for_each_replica(
          model_fn, (features, tf.zeros([8], tf.int64),
                     tf.estimator.ModeKeys.TRAIN, {}, None))

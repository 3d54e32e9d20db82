"""BinaryClassifierModel, the click (CTR) head: its loss, predictions,
metrics, refusals and export; the zoo's click models use it; and the
runnable blocks of docs/click-models.md, then the blocks of
docs/large-tables.md that build on them, which train click models built on
it, run."""
import os

import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from model_zoo import census
from model_zoo import movielens
from model_zoo import wide_deep
from tests.helpers import docs

_PAGE = os.path.join(docs.DOCS, "click-models.md")
_SHARDED_PAGE = os.path.join(docs.DOCS, "large-tables.md")
_BUILDS_ON_PAGE = "builds on click-models.md"
"""How a block of _SHARDED_PAGE that needs _PAGE's names says so."""

# A planted case: 3 clicks, 3 not; of the 9 (click, not) pairs the click
# scores higher in 8, so the ROC AUC is 8/9. At 0.5: 2 true positives, no
# false positive, 1 missed click.
_LABELS = np.array([0, 0, 1, 1, 0, 1], np.int64)
_PROBABILITIES = np.array([0.1, 0.4, 0.35, 0.8, 0.2, 0.9], np.float32)
_LOGITS = np.log(_PROBABILITIES / (1 - _PROBABILITIES)).reshape(-1, 1)


class _Linear(es.BinaryClassifierModel):
  """One logit from 4 numbers."""

  name = "linear_clicks"

  def logits(self, features, training, params):
    return tf.keras.layers.Dense(1, name="logit")(features["x"])

  def serving_features(self):
    return {"x": tf.TensorSpec([4], tf.float32)}


class _TwoLogits(_Linear):
  name = "two_logits"

  def logits(self, features, training, params):
    return tf.keras.layers.Dense(2, name="logits")(features["x"])


def _data(count=64, seed=0):
  rng = np.random.RandomState(seed)
  x = rng.standard_normal((count, 4)).astype(np.float32)
  return {"x": x}, (x[:, 0] + 0.5 * rng.standard_normal(count) > 0).astype(
      np.int64)


def _estimator(model, model_dir):
  return es.make_estimator(model, model_dir=str(model_dir), random_seed=0,
                           training_config=es.TrainingConfig(
                               learning_rate=0.1))


def _metric_values(model, labels, logits):
  """{key: value} of `eval_metrics` over one batch, as Estimator runs them."""
  with tf.Graph().as_default():
    metrics = model.eval_metrics(tf.constant(labels), tf.constant(logits), {})
    pairs, variables = {}, []
    for key, metric in metrics.items():
      if isinstance(metric, tf.keras.metrics.Metric):
        variables += metric.variables
        metric = (metric.result(), metric.updates[0])
      pairs[key] = metric
    with tf.compat.v1.Session() as session:
      session.run([tf.compat.v1.local_variables_initializer(),
                   tf.compat.v1.variables_initializer(variables)])
      session.run([update for _, update in pairs.values()])
      return session.run({key: value for key, (value, _) in pairs.items()})


def test_loss_is_the_mean_sigmoid_cross_entropy():
  rng = np.random.RandomState(0)
  logits = rng.standard_normal((16, 1)).astype(np.float32) * 3
  labels = rng.randint(0, 2, 16).astype(np.int64)  # [batch], as files give
  loss = _Linear().loss(tf.constant(labels), tf.constant(logits), {})
  x, z = logits[:, 0].astype(np.float64), labels.astype(np.float64)
  by_hand = np.mean(-z * np.log(1 / (1 + np.exp(-x))) -
                    (1 - z) * np.log(1 - 1 / (1 + np.exp(-x))))
  np.testing.assert_allclose(loss.numpy(), by_hand, rtol=1e-5)


def test_labels_outside_0_and_1_are_refused():
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="model 'linear_clicks': labels must be 0 or 1"):
    _Linear().loss(tf.constant([0, 2]), tf.zeros([2, 1]), {})


@pytest.mark.parametrize("shape", [(6, 1), (6,)], ids=["batch-1", "batch"])
def test_predictions_are_probability_logit_and_class_per_example(shape):
  predicted = _Linear().predictions(
      tf.constant(_LOGITS.reshape(shape)), {})
  assert sorted(predicted) == ["class_ids", "logistic", "logits"]
  for value in predicted.values():
    assert value.shape == (6, 1)
  np.testing.assert_allclose(predicted["logistic"].numpy()[:, 0],
                             _PROBABILITIES, rtol=1e-6)
  np.testing.assert_array_equal(predicted["class_ids"].numpy()[:, 0],
                                _PROBABILITIES > 0.5)
  assert predicted["class_ids"].dtype == tf.int64


def test_metrics_on_a_planted_case():
  values = _metric_values(_Linear(), _LABELS, _LOGITS)
  assert sorted(values) == [
      "accuracy", "auc", "auc_precision_recall", "calibration", "label/mean",
      "precision", "prediction/mean", "recall"]
  np.testing.assert_allclose(values["auc"], 8 / 9, atol=1e-3)
  np.testing.assert_allclose(values["accuracy"], 5 / 6, rtol=1e-6)
  np.testing.assert_allclose(values["precision"], 1.0, rtol=1e-6)
  np.testing.assert_allclose(values["recall"], 2 / 3, rtol=1e-6)
  np.testing.assert_allclose(values["label/mean"], 0.5, rtol=1e-6)
  np.testing.assert_allclose(values["prediction/mean"],
                             _PROBABILITIES.mean(), rtol=1e-6)
  np.testing.assert_allclose(values["calibration"],
                             _PROBABILITIES.mean() / 0.5, rtol=1e-6)
  # Average precision by hand, ranked by score: hits at ranks 1, 2 and 4.
  assert abs(values["auc_precision_recall"] - (1 + 1 + 3 / 4) / 3) < 0.05


def test_reversed_scores_give_the_complementary_auc():
  values = _metric_values(_Linear(), _LABELS, -_LOGITS)
  np.testing.assert_allclose(values["auc"], 1 / 9, atol=1e-3)


def test_logits_of_two_per_example_are_refused_naming_model_and_shape(
    tmp_path):
  features, labels = _data()
  estimator = _estimator(_TwoLogits(), tmp_path)
  with pytest.raises(es.errors.ConfigError,
                     match=r"model 'two_logits': a BinaryClassifierModel's "
                           r"logits are one per example, \[batch, 1\].*"
                           r"shape \(16, 2\)"):
    estimator.train(es.inputs.from_arrays(features, labels, 16), max_steps=1)


def test_a_classifier_of_one_logit_points_to_the_binary_head():
  class OneLogit(es.ClassifierModel):
    def serving_features(self):
      return {}

  with tf.Graph().as_default():
    logits = tf.compat.v1.placeholder(tf.float32, [None, 1])
    with pytest.raises(es.errors.ConfigError,
                       match=r"model 'OneLogit'.*shape \(None, 1\).*"
                             r"subclass BinaryClassifierModel"):
      OneLogit().loss(tf.constant([1]), logits, {})


def test_trains_evaluates_and_exports_the_probability(tmp_path):
  features, labels = _data()
  estimator = _estimator(_Linear(), tmp_path / "model")
  estimator.train(es.inputs.from_arrays(features, labels, 16), max_steps=5)
  metrics = estimator.evaluate(
      es.inputs.from_arrays(features, labels, 32, training=False))
  assert {"auc", "auc_precision_recall", "calibration", "label/mean",
          "loss"} <= set(metrics)
  np.testing.assert_allclose(metrics["label/mean"], labels.mean(), rtol=1e-6)

  predicted = next(estimator.predict(
      es.inputs.from_arrays(features, labels, 64, training=False),
      yield_single_examples=False))
  path = os.fsdecode(estimator.export_saved_model(str(tmp_path / "export")))
  served = tf.saved_model.load(path).signatures["serving_default"](
      x=tf.constant(features["x"]))
  assert served["logistic"].shape == (64, 1)
  np.testing.assert_allclose(served["logistic"].numpy(),
                             predicted["logistic"], atol=1e-6)
  np.testing.assert_allclose(served["logistic"].numpy(),
                             tf.sigmoid(served["logits"]).numpy(), atol=1e-6)


@pytest.mark.parametrize("model", [wide_deep.WideDeep, census.Census,
                                   movielens.MovieLens],
                         ids=lambda model: model.name)
def test_the_zoos_click_models_use_the_head(model):
  assert issubclass(model, es.BinaryClassifierModel)


def _blocks_to_run():
  """[(page, first line, text)]: _PAGE's ```python blocks but its
  fragments, then _SHARDED_PAGE's fragments that build on them."""
  own = [(_PAGE, line, text) for text, line, reason
         in docs.python_blocks(_PAGE) if reason is None]
  building_on = [(_SHARDED_PAGE, line, text) for text, line, reason
                 in docs.python_blocks(_SHARDED_PAGE)
                 if reason and reason.startswith(_BUILDS_ON_PAGE)]
  return own + building_on


def test_the_click_model_guides_run(tmp_path, monkeypatch):
  """Their runnable blocks, in order, in one namespace, in a fresh
  directory: they train click models on BinaryClassifierModel a few steps
  each."""
  monkeypatch.chdir(tmp_path)
  blocks = _blocks_to_run()
  assert len(blocks) >= 5
  assert sum(page == _SHARDED_PAGE for page, _, _ in blocks) == 2
  namespace = {"__name__": "__main__"}
  for page, line, text in blocks:
    code = compile("\n" * (line - 1) + text, page, "exec")
    exec(code, namespace)  # pylint: disable=exec-used
  models = [value for value in namespace.values()
            if isinstance(value, type) and issubclass(value, es.BaseModel)]
  assert len(models) == 3 and all(
      issubclass(model, es.BinaryClassifierModel) for model in models)
  assert 0.6 < namespace["metrics"]["auc"] <= 1  # it learned the clicks

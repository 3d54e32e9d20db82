"""The contract every registered model keeps: train, evaluate, predict, export,
reload the SavedModel and predict the same values."""
import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale import registry


@pytest.mark.parametrize("name", registry.names())
def test_model_contract(name, tmp_path):
  model = registry.get(name)
  estimator = es.make_estimator(model, model_dir=str(tmp_path / "model"),
                                random_seed=0,
                                training_config=es.TrainingConfig(
                                    schedule=es.Schedule(learning_rate=0.01)))
  batch = 8
  train = estimator.model_input_fn(tf.estimator.ModeKeys.TRAIN, batch)
  estimator.train(train, max_steps=3)
  assert estimator.get_variable_value("global_step") == 3
  metrics = estimator.evaluate(
      estimator.model_input_fn(tf.estimator.ModeKeys.EVAL, batch), steps=2)
  assert np.isfinite(metrics["loss"])

  features = {}
  for key, spec in model.serving_features().items():
    shape = [4] + list(spec.shape)
    features[key] = np.random.RandomState(0).uniform(size=shape).astype(
        spec.dtype.as_numpy_dtype)
  predicted = list(estimator.predict(
      lambda: tf.data.Dataset.from_tensor_slices(features).batch(4),
      yield_single_examples=False))[0]

  path = estimator.export_saved_model(str(tmp_path / "export"))
  loaded = tf.saved_model.load(path.decode() if isinstance(path, bytes)
                               else path)
  serve = loaded.signatures["serving_default"]
  served = serve(**{k: tf.constant(v) for k, v in features.items()})
  for key, value in predicted.items():
    np.testing.assert_allclose(served[key].numpy(), value, rtol=1e-5,
                               atol=1e-5)


def _initial_weights(tmp_path, name, seed):
  model = registry.get("digits_mlp")
  estimator = es.make_estimator(model, model_dir=str(tmp_path / name),
                                random_seed=seed)
  estimator.train(estimator.model_input_fn(tf.estimator.ModeKeys.TRAIN, 8),
                  max_steps=1)
  checkpoint = str(tmp_path / name / "model.ckpt-0")
  return {n: tf.train.load_variable(checkpoint, n)
          for n, _ in tf.train.list_variables(checkpoint)
          if n.startswith("model/")}


def test_random_seed_fixes_initial_weights(tmp_path):
  first = _initial_weights(tmp_path, "a", seed=7)
  again = _initial_weights(tmp_path, "b", seed=7)
  other = _initial_weights(tmp_path, "c", seed=8)
  assert first and first.keys() == again.keys()
  for name, value in first.items():
    np.testing.assert_array_equal(value, again[name], err_msg=name)
  assert any(not np.array_equal(value, other[name])
             for name, value in first.items() if "kernel" in name)

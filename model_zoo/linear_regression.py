"""Linear regression on synthetic data with known weights (a correctness check)."""
import numpy as np
import tensorflow as tf

import estimator_scale as es

TRUE_WEIGHTS = np.array([[2.0], [-3.0], [0.5], [1.5]], np.float32)
TRUE_BIAS = 0.25


def make_data(count, seed, noise=0.01):
  """x ~ N(0, I), y = x w + b + noise: the model should recover w and b."""
  rng = np.random.RandomState(seed)
  x = rng.standard_normal((count, TRUE_WEIGHTS.shape[0])).astype(np.float32)
  y = x @ TRUE_WEIGHTS + TRUE_BIAS + noise * rng.standard_normal(
      (count, 1)).astype(np.float32)
  return x, y.astype(np.float32)


@es.register
class LinearRegression(es.RegressionModel):
  """y = x w + b fitted to synthetic data whose true w and b are known."""

  name = "linear_regression"

  def default_hparams(self):
    """See base class."""
    return {"train_examples": 4096, "eval_examples": 1024, "data_seed": 0}

  def logits(self, features, training, params):
    """See base class; starts from zero, so any recovered weight is learned."""
    return tf.keras.layers.Dense(1, kernel_initializer="zeros",
                                 bias_initializer="zeros",
                                 name="linear")(features["x"])

  def serving_features(self):
    """See base class."""
    return {"x": tf.TensorSpec([TRUE_WEIGHTS.shape[0]], tf.float32)}

  def input_fn(self, mode, global_batch_size, params, topology=None,
               accumulation_steps=1):
    """See base class."""
    training = mode == tf.estimator.ModeKeys.TRAIN
    count = params["train_examples" if training else "eval_examples"]
    x, y = make_data(count, params["data_seed"] + (0 if training else 1))
    return es.inputs.from_arrays({"x": x}, y, global_batch_size,
                                 training=training, topology=topology,
                                 accumulation_steps=accumulation_steps,
                                 seed=params["data_seed"])

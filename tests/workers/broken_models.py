"""A user's model with a shape bug, for the CLI's error-reporting test."""
import tensorflow as tf

import estimator_scale as es
from model_zoo import digits

BUG_LINE = "return tf.matmul(pixels, tf.ones([63, 10]))  # 64 pixels, not 63"


@es.register
class ShapeBug(digits.DigitsMLP):
  """digits_mlp whose output layer expects 63 pixels instead of 64."""

  name = "shape_bug"

  def logits(self, features, training, params):
    pixels = tf.keras.layers.Flatten()(features["image"])
    return tf.matmul(pixels, tf.ones([63, 10]))  # 64 pixels, not 63

"""A click model for days of logs (tests/helpers/day_logs.py) that records
the ids it trains on, for --model_module=tests.workers.day_clicks.

With DAY_IDS_FILE set, each update appends its ids to that file
(`trained_ids.IdsHook`), so a test can count each example's updates across
kills and restarts; DAY_SECONDS_PER_UPDATE pauses after each update, so a
test can kill the job inside a day.
"""
import tensorflow as tf

import estimator_scale as es
from tests.helpers import trained_ids


@es.register
class DayClicks(es.BinaryClassifierModel):
  """Logistic regression on 4 features; the files also hold `id`."""

  name = "day_clicks"

  def logits(self, features, training, params):
    return tf.keras.layers.Dense(
        1, kernel_initializer=tf.keras.initializers.Zeros())(features["x"])

  def serving_features(self):
    return {"x": tf.TensorSpec([4], tf.float32)}

  def feature_spec(self):
    spec = super().feature_spec()
    spec["id"] = tf.io.FixedLenFeature([], tf.int64)
    return spec

  def training_hooks(self, features, labels):
    return trained_ids.day_hooks(features["id"])

"""Learning-rate schedules of a float step, so AdaScale can use floor(tau)."""
import math

import tensorflow as tf

from estimator_scale import choices
from estimator_scale import errors

SCHEDULES = choices.SCHEDULES


def check(config):
  """Raises ConfigError unless `config`'s schedule fields can run."""
  choices.require("lr_schedule", config.lr_schedule, SCHEDULES)
  if not config.learning_rate > 0:
    raise errors.ConfigError(
        f"learning_rate={config.learning_rate} must be > 0")
  if config.lr_schedule in ("cosine", "polynomial") and (
      config.lr_decay_steps < 1):
    raise errors.ConfigError(
        f"lr_schedule={config.lr_schedule!r} needs lr_decay_steps >= 1, got "
        f"lr_decay_steps={config.lr_decay_steps}")
  if list(config.lr_boundaries) != sorted(config.lr_boundaries):
    raise errors.ConfigError(
        f"lr_boundaries={list(config.lr_boundaries)} must be increasing")
  if config.warmup_steps < 0:
    raise errors.ConfigError(
        f"warmup_steps={config.warmup_steps} must be >= 0")


def learning_rate(config, step):
  """The S = 1 rate of `config`'s schedule at `step` (a float tensor)."""
  step = tf.cast(step, tf.float32)
  lr = tf.constant(config.learning_rate, tf.float32)
  if config.lr_schedule == "piecewise" and config.lr_boundaries:
    passed = tf.add_n([tf.cast(step >= b, tf.float32)
                       for b in config.lr_boundaries])
    lr = lr * tf.pow(tf.constant(config.lr_decay_rate, tf.float32), passed)
  elif config.lr_schedule in ("cosine", "polynomial"):
    done = (tf.minimum(step, float(config.lr_decay_steps)) /
            config.lr_decay_steps)
    if config.lr_schedule == "cosine":
      lr = lr * (0.5 * (1.0 + tf.cos(math.pi * done)))
    else:
      lr = lr * tf.pow(1.0 - done, config.lr_power)
  if config.warmup_steps:
    lr = lr * tf.minimum(1.0, (step + 1.0) / config.warmup_steps)
  return lr

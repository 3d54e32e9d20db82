"""Large-batch learning-rate rules: how the base rate grows with the scale S."""
import math

import tensorflow as tf

from estimator_scale import choices
from estimator_scale import errors

RULES = choices.LR_SCALING_RULES


def check_rule(rule, batch_scale):
  """Raises ConfigError for an unknown rule or a batch scale S below 1."""
  choices.require("lr_scaling", rule, RULES)
  if batch_scale is not None and not batch_scale >= 1:
    raise errors.ConfigError(f"batch_scale={batch_scale} must be >= 1")


def scaled_learning_rate(rule, schedule, step, batch_scale, warmup_updates=0):
  """The learning rate of a fixed rule (not AdaScale) at `step`.

  Args:
    rule: `identity`, `linear` or `sqrt`.
    schedule: maps a float step to the base (S = 1) rate.
    step: the update count (global_step).
    batch_scale: S.
    warmup_updates: `linear`: base to S x base over this many updates.

  Returns:
    A float32 scalar tensor.
  """
  base = schedule(step)
  if rule == "identity" or batch_scale == 1:
    return base
  if rule == "sqrt":
    return base * math.sqrt(batch_scale)
  if rule != "linear":
    raise ValueError(f"{rule!r} is not a fixed scaling rule")
  if not warmup_updates:
    return base * float(batch_scale)
  done = tf.minimum(tf.cast(step, tf.float32) / warmup_updates, 1.0)
  return base * (1.0 + (float(batch_scale) - 1.0) * done)

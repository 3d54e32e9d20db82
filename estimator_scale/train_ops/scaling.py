"""Large-batch learning-rate rules: how the base rate grows with the scale S."""
import functools
import math

from absl import logging
import tensorflow as tf

from estimator_scale import choices
from estimator_scale import errors

RULES = choices.LR_SCALING_RULES

HELD_UP_TO = {"linear": 2, "sqrt": 1, "adascale": 16, "cowclip": 1}
"""The largest S at which each rule that adapts the rate kept the S = 1
AUC in the project's click studies under Adagrad, the optimizer they ran
at every S, read off their pages (STUDIES)."""
STUDIES = "docs/adascale/batch_study.md, docs/adascale/click_study.md"


def warn_beyond_studied(rule, batch_scale):
  """One warning line per process where S is past what the studies showed
  `rule` to hold at: the user should know they are off the measured map."""
  if batch_scale > HELD_UP_TO.get(rule, math.inf):
    _warn_once(rule, batch_scale)


@functools.lru_cache(maxsize=None)
def _warn_once(rule, batch_scale):
  logging.warning(
      "lr_scaling=%r at S = %g: the click studies kept the S = 1 AUC with "
      "it under Adagrad only up to S = %d (%s)", rule, batch_scale,
      HELD_UP_TO[rule], STUDIES)


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

"""Learning-rate schedules as functions of a float step.

The step is a float tensor so AdaScale can evaluate a schedule on its
scale-invariant progress (floor of tau) instead of on global_step.
"""
import dataclasses
import math
from typing import Tuple

import tensorflow as tf

from estimator_scale import errors
from estimator_scale.train_ops import names

SCHEDULES = names.SCHEDULES


@dataclasses.dataclass(frozen=True)
class Schedule:
  """A base learning rate and how it decays over updates.

  Attributes:
    name: one of `SCHEDULES`.
    learning_rate: the rate at step 0 (after warm-up).
    boundaries: `piecewise` steps at which the rate is multiplied by
      `decay_rate`.
    decay_rate: `piecewise` factor per boundary.
    decay_steps: length of `cosine` / `polynomial` decay.
    end_learning_rate_fraction: final rate of `cosine` / `polynomial`, as a
      fraction of `learning_rate`.
    power: `polynomial` exponent.
    warmup_steps: linear warm-up from 0 over this many steps (0 = none).
  """
  name: str = "constant"
  learning_rate: float = 0.1
  boundaries: Tuple[int, ...] = ()
  decay_rate: float = 0.1
  decay_steps: int = 0
  end_learning_rate_fraction: float = 0.0
  power: float = 1.0
  warmup_steps: int = 0

  def __post_init__(self):
    if self.name not in SCHEDULES:
      raise errors.ConfigError(f"lr_schedule={self.name!r} is unknown; "
                               f"valid: {', '.join(SCHEDULES)}")
    if not self.learning_rate > 0:
      raise errors.ConfigError(
          f"learning_rate={self.learning_rate} must be > 0")
    if self.name in ("cosine", "polynomial") and self.decay_steps < 1:
      raise errors.ConfigError(
          f"lr_schedule={self.name!r} needs lr_decay_steps >= 1, got "
          f"lr_decay_steps={self.decay_steps}")
    if list(self.boundaries) != sorted(self.boundaries):
      raise errors.ConfigError(
          f"lr_boundaries={list(self.boundaries)} must be increasing")
    if self.warmup_steps < 0:
      raise errors.ConfigError(
          f"warmup_steps={self.warmup_steps} must be >= 0")

  def __call__(self, step):
    """The learning rate at `step` (a float tensor)."""
    step = tf.cast(step, tf.float32)
    lr = tf.constant(self.learning_rate, tf.float32)
    if self.name == "piecewise" and self.boundaries:
      passed = tf.add_n([tf.cast(step >= b, tf.float32)
                         for b in self.boundaries])
      lr = lr * tf.pow(tf.constant(self.decay_rate, tf.float32), passed)
    elif self.name in ("cosine", "polynomial"):
      done = tf.minimum(step, float(self.decay_steps)) / self.decay_steps
      if self.name == "cosine":
        shape = 0.5 * (1.0 + tf.cos(math.pi * done))
      else:
        shape = tf.pow(1.0 - done, self.power)
      end = self.end_learning_rate_fraction
      lr = lr * (end + (1.0 - end) * shape)
    if self.warmup_steps:
      lr = lr * tf.minimum(1.0, (step + 1.0) / self.warmup_steps)
    return lr

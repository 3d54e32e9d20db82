"""Mixed precision: the network computes in a 16-bit type, the rest in float32.

Keras layers follow the global dtype policy, set only while the network is
built; v1 variables get a getter storing float32 and reading trainable
ones in the low type. float16 needs dynamic loss scaling (a power of two,
so unscaling is exact): a non-finite update is skipped and the scale
halved; bfloat16 needs none.
"""
import contextlib
import threading

import tensorflow as tf

from estimator_scale import choices

PRECISIONS = choices.PRECISIONS
SCOPE = "loss_scale"
LOSS_SCALE = f"{SCOPE}/scale"
GOOD_UPDATES = f"{SCOPE}/good_updates"
INITIAL_LOSS_SCALE = 2.0 ** 15
GROWTH_STEPS = 2000
"""Keras' LossScaleOptimizer defaults: start at 2^15, double after 2000."""

_COMPUTE_DTYPES = {"float32": tf.float32, "mixed_bfloat16": tf.bfloat16,
                   "mixed_float16": tf.float16}
_active = threading.local()


def check_precision(precision):
  """Raises ConfigError unless `precision` is one of PRECISIONS."""
  choices.require("precision", precision, PRECISIONS)


def compute_dtype(precision):
  """The dtype the network computes in."""
  check_precision(precision)
  return _COMPUTE_DTYPES[precision]


def needs_loss_scaling(precision):
  return precision == "mixed_float16"


@contextlib.contextmanager
def network_scope(precision):
  """Builds and runs a network in `precision`; re-entering changes nothing."""
  check_precision(precision)
  if precision == "float32" or getattr(_active, "precision", None):
    yield
    return
  policy = tf.keras.mixed_precision.global_policy()
  tf.keras.mixed_precision.set_global_policy(precision)
  _active.precision = precision
  try:
    with tf.compat.v1.variable_scope(
        tf.compat.v1.get_variable_scope(), auxiliary_name_scope=False,
        custom_getter=_float32_storage(compute_dtype(precision))):
      yield
  finally:
    _active.precision = None
    tf.keras.mixed_precision.set_global_policy(policy)


def network_dtype():
  """The dtype `network_scope` reads variables in, or None outside one."""
  active = getattr(_active, "precision", None)
  return compute_dtype(active) if active else None


@contextlib.contextmanager
def variables_as_stored():
  """Within it, `network_scope` hands back the float32 variables themselves:
  casting every read of an embedding table would copy the table each step."""
  before = getattr(_active, "as_stored", False)
  _active.as_stored = True
  try:
    yield
  finally:
    _active.as_stored = before


def _float32_storage(dtype):
  """A v1 custom getter: float32 storage, trainable ones read in `dtype`."""

  # TensorFlow passes the next getter as the keyword `getter`.
  def storage_getter(getter, name, *args, **kwargs):
    requested = tf.as_dtype(kwargs.get("dtype") or tf.float32)
    if not requested.is_floating:
      return getter(name, *args, **kwargs)
    kwargs["dtype"] = tf.float32
    variable = getter(name, *args, **kwargs)
    if kwargs.get("trainable") is False or getattr(_active, "as_stored",
                                                   False):
      return variable
    return tf.cast(variable, dtype)
  return storage_getter


def cast_floating(nest, dtype):
  """Every floating tensor of `nest` in `dtype`; other tensors unchanged."""
  def cast(tensor):
    if isinstance(tensor, tf.Tensor) and tensor.dtype.is_floating:
      return tf.cast(tensor, dtype)
    return tensor
  return tf.nest.map_structure(cast, nest)


class LossScale:
  """The dynamic loss scale's state (variables under `loss_scale/`).

  Args:
    initial: the first scale, a power of two.
    growth_steps: good updates in a row after which the scale doubles.
  """

  def __init__(self, initial=INITIAL_LOSS_SCALE, growth_steps=GROWTH_STEPS):
    if growth_steps < 1:
      raise ValueError(f"growth_steps must be >= 1, got {growth_steps}")
    self.growth_steps = int(growth_steps)
    with tf.compat.v1.variable_scope(SCOPE, reuse=tf.compat.v1.AUTO_REUSE):
      self.scale = _state(LOSS_SCALE, tf.float32, initial)
      self.good_updates = _state(GOOD_UPDATES, tf.int64, 0)

  def value(self):
    return self.scale.read_value()

  def update(self, finite):
    """Ops halving the scale after a non-finite update (not below 1), doubling
    it after `growth_steps` finite ones."""
    good = tf.where(finite, self.good_updates + 1, tf.constant(0, tf.int64))
    grow = good >= self.growth_steps
    scale = self.scale.read_value()
    new_scale = tf.where(finite, tf.where(grow, scale * 2.0, scale),
                         tf.maximum(scale / 2.0, 1.0))
    return tf.group(self.scale.assign(new_scale),
                    self.good_updates.assign(
                        tf.where(grow, tf.constant(0, tf.int64), good)))


def _state(full_name, dtype, initial):
  return tf.compat.v1.get_variable(
      full_name[len(SCOPE) + 1:], shape=[], dtype=dtype, trainable=False,
      initializer=tf.compat.v1.constant_initializer(initial),
      aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
      use_resource=True)

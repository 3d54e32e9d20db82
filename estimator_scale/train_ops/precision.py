"""Mixed precision: the network computes in a 16-bit type, the rest in float32.

`--precision=mixed_bfloat16` or `mixed_float16` runs the network's
arithmetic in the low type while the variables, the gradients the optimizer
sees, the optimizer's slots, AdaScale's estimates and the loss stay
float32. Two kinds of network code need two mechanisms:

- Keras layers (made in `logits` or in `keras_model`) follow the Keras
  global dtype policy that is current when they are created; it is set for
  as long as the network is built and put back afterwards, so a user's other
  Keras code in the process is untouched. Keras keeps their variables
  float32 and casts them on read itself.
- v1 layers and `get_variable` follow the variable scope: a custom getter
  stores every floating variable as float32 (whatever dtype was asked for)
  and hands the network a read cast to the low type when the variable is
  trainable. Non-trainable state (moving statistics) stays float32, as
  Keras keeps it, so the network's own writes to it still type-check.

float16 has 5 exponent bits: small gradients underflow to zero and large
ones overflow. Dynamic loss scaling (as Keras' LossScaleOptimizer does)
multiplies the loss by S before differentiating and the gradients by 1/S
after; S is a power of two, so the unscaling is exact in float32. An update
whose (globally reduced) gradients are not finite is skipped and S halved;
after `growth_steps` good updates in a row S doubles. bfloat16 has float32's
exponent range and needs no scaling.
"""
import contextlib
import threading

import tensorflow as tf

from estimator_scale import errors
from estimator_scale.train_ops import names

PRECISIONS = names.PRECISIONS
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
  if precision not in PRECISIONS:
    raise errors.ConfigError(f"precision={precision!r} is unknown; valid: "
                             f"{', '.join(PRECISIONS)}")


def compute_dtype(precision):
  """The dtype the network computes in."""
  check_precision(precision)
  return _COMPUTE_DTYPES[precision]


def needs_loss_scaling(precision):
  return precision == "mixed_float16"


@contextlib.contextmanager
def network_scope(precision):
  """Builds and runs a network in `precision` (see the module docstring).

  Re-entering it (the pipeline around a model_fn's network that entered it
  too) changes nothing, so each variable is cast once.
  """
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
  """The dtype `network_scope` reads variables in while it builds a
  network, or None outside one."""
  active = getattr(_active, "precision", None)
  return compute_dtype(active) if active else None


@contextlib.contextmanager
def variables_as_stored():
  """Within it, `network_scope`'s getter hands back the float32 variables
  themselves: for a variable whose reads are not the whole variable (an
  embedding table's gathered rows, cast by the caller), a cast of every
  read would copy the whole table each step."""
  before = getattr(_active, "as_stored", False)
  _active.as_stored = True
  try:
    yield
  finally:
    _active.as_stored = before


def _float32_storage(dtype):
  """A v1 custom getter: float32 variables, trainable ones read in `dtype`
  (outside `variables_as_stored`)."""

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
    """Ops that halve the scale after a non-finite update (not below 1) and
    double it after `growth_steps` finite ones in a row."""
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

"""Any initializer a TensorFlow 2 user writes, drawing one part of a table.

Parts of a split table are drawn where they live, so no process holds it
whole, yet v1, Keras and TF 2 initializers take parts differently or not
at all. Constants give the part's rows; random ones are seeded from seed
and first row (parts differ, reruns repeat); variance scaling uses the
whole table's fans; others are given `partition_info` or drawn whole and
sliced.
"""
import inspect
import math
import numbers

import numpy as np
import tensorflow as tf
from tensorflow.python.ops import init_ops  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.ops import init_ops_v2  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.ops import variable_scope as tf_variable_scope  # pylint: disable=g-direct-tensorflow-import

from estimator_scale import errors

_KERAS = tf.keras.initializers

_FIXED = {init_ops.Zeros: 0, init_ops_v2.Zeros: 0, _KERAS.Zeros: 0,
          init_ops.Ones: 1, init_ops_v2.Ones: 1, _KERAS.Ones: 1}
_CONSTANTS = (init_ops.Constant, init_ops_v2.Constant, _KERAS.Constant)

_RANDOM = {  # each family's class: its v1 twin, which takes an op seed
    init_ops.RandomNormal: init_ops.RandomNormal,
    init_ops_v2.RandomNormal: init_ops.RandomNormal,
    _KERAS.RandomNormal: init_ops.RandomNormal,
    init_ops.RandomUniform: init_ops.RandomUniform,
    init_ops_v2.RandomUniform: init_ops.RandomUniform,
    _KERAS.RandomUniform: init_ops.RandomUniform,
    init_ops.TruncatedNormal: init_ops.TruncatedNormal,
    init_ops_v2.TruncatedNormal: init_ops.TruncatedNormal,
    _KERAS.TruncatedNormal: init_ops.TruncatedNormal,
}
_VARIANCE_SCALING = (init_ops.VarianceScaling, init_ops_v2.VarianceScaling,
                     _KERAS.VarianceScaling)


def value_of(initializer):
  """A zeros, ones or constant initializer's value (numpy), else None."""
  if type(initializer) in _FIXED:
    return np.asarray(_FIXED[type(initializer)])
  if type(initializer) in _CONSTANTS:
    return np.asarray(initializer.value)
  return None


def filled(value):
  """A v1 initializer of one value, from `Empty`: constant folding would keep
  a variable-sized graph constant. The shape may be a tensor."""
  def initializer(shape, dtype=None, partition_info=None):
    del partition_info  # every part holds the same value
    dtype = tf.as_dtype(dtype or tf.float32)
    zeros = tf.raw_ops.Empty(shape=shape, dtype=dtype, init=True)
    return zeros + tf.constant(value, dtype) if value else zeros
  return initializer


def _part_seed(seed, offset):
  """A seed of the part at row `offset`: the same in every process."""
  return None if seed is None else hash((seed, offset)) & 0x7FFFFFFF


def _constant_rows(value, full_shape, offset):
  """A v1 initializer of the rows from `offset` of a table filled with
  `value` (one value, or one per element)."""
  if value.size == 1:
    return filled(value.item())
  if value.size != math.prod(full_shape):
    raise errors.ConfigError(
        f"initializer: a constant of {value.size} values cannot fill a "
        f"table of shape {list(full_shape)}: give one value, or "
        f"{math.prod(full_shape)} values")
  table = value.reshape(full_shape)

  def initializer(shape, dtype=None, partition_info=None):
    del partition_info  # the rows are fixed by `offset`
    rows = shape[0]
    if isinstance(rows, numbers.Integral):  # only these rows in the graph
      return tf.constant(table[offset:offset + rows], dtype)
    return tf.constant(table, dtype)[offset:offset + rows]
  return initializer


def _takes_partition_info(initializer):
  try:
    return "partition_info" in inspect.signature(initializer).parameters
  except (TypeError, ValueError):  # no signature to read (a builtin)
    return False


def _with_partition_info(initializer, full_shape, offset):
  info = tf_variable_scope._PartitionInfo(  # pylint: disable=protected-access
      full_shape=list(full_shape),
      var_offset=[offset] + [0] * (len(full_shape) - 1))
  return lambda shape, dtype=None, partition_info=None: initializer(
      shape, dtype=dtype, partition_info=info)


def _known(initializer, full_shape, offset):
  """`part_initializer` of a kind this module knows, else None."""
  value = value_of(initializer)
  if value is not None:
    return _constant_rows(value, full_shape, offset)
  seed = _part_seed(getattr(initializer, "seed", None), offset)
  if isinstance(initializer, _VARIANCE_SCALING):
    # v1's, given the part, takes its fans from the whole table.
    return _with_partition_info(init_ops.VarianceScaling(
        scale=initializer.scale, mode=initializer.mode,
        distribution=initializer.distribution, seed=seed), full_shape, offset)
  if type(initializer) in _RANDOM:
    config = dict(initializer.get_config(), seed=seed)
    config.pop("dtype", None)
    twin = _RANDOM[type(initializer)](**config)
    return lambda shape, dtype=None, partition_info=None: twin(shape, dtype)
  if _takes_partition_info(initializer):
    return _with_partition_info(initializer, full_shape, offset)
  return None


def _check(initializer):
  if not callable(initializer) and value_of(initializer) is None:
    raise errors.ConfigError(
        f"initializer={initializer!r} is not an initializer: give a v1, "
        "TF 2 or Keras initializer, or a function of (shape, dtype)")


def part_initializer(initializer, full_shape, offset):
  """A v1 initializer of the part at row `offset` of a `full_shape` table
  (its `partition_info` ignored); `initializer`: a v1, TF 2 or Keras one, or
  a function of (shape, dtype[, partition_info]). Raises ConfigError for
  what is not an initializer, or a constant not filling the table."""
  _check(initializer)
  known = _known(initializer, full_shape, offset)
  if known is not None:
    return known

  def sliced(shape, dtype=None, partition_info=None):
    del partition_info
    whole = initializer(list(full_shape), dtype=dtype or tf.float32)
    return whole[offset:offset + shape[0]]
  return sliced


def partition_aware(initializer):
  """`initializer` as a v1 initializer drawing the part its `partition_info`
  names (whole without one), for get_variable's own partitioning."""
  def initializer_of_part(shape, dtype=None, partition_info=None):
    if (partition_info is None or
        list(partition_info.full_shape) == list(shape)):
      # The whole table in one part: drawn as the user's initializer draws
      # it unsplit, so one part on a ps task holds one process's values.
      return _whole(initializer)(shape, dtype)
    return part_initializer(initializer, partition_info.full_shape,
                            partition_info.var_offset[0])(shape, dtype)
  return initializer_of_part


def _whole(initializer):
  """`initializer` called without a part, whatever its family's contract."""
  _check(initializer)
  value = value_of(initializer)
  if value is not None and value.size == 1:
    return filled(value.item())
  return lambda shape, dtype=None: initializer(
      shape, dtype=dtype or tf.float32)


def draw_rows(initializer, count, table_shape, dtype=tf.float32):
  """`count` (maybe a tensor) new rows of a table of `table_shape`, drawn as
  `part_initializer` draws (unknown kinds: as a table of `count` rows);
  random kinds draw anew at each run.

  Returns:
    A tensor of shape [count] + table_shape[1:].
  """
  _check(initializer)
  shape = [count] + list(table_shape[1:])
  known = _known(initializer, table_shape, 0)
  if known is None:
    return initializer(shape, dtype=dtype)
  return known(shape, dtype)

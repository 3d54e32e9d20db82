"""Gradients that may be dense or IndexedSlices, through `map_values`, so
every stage keeps embedding gradients sparse."""
import tensorflow as tf


def map_values(fn, grad):
  """`fn` of a dense gradient or of IndexedSlices' values (None stays)."""
  if grad is None:
    return None
  if isinstance(grad, tf.IndexedSlices):
    return tf.IndexedSlices(fn(grad.values), grad.indices, grad.dense_shape)
  return fn(grad)


def scale(grad, factor):
  """grad x factor (a Python number or scalar tensor)."""
  return map_values(lambda values: values * factor, grad)


def cast(grad, dtype):
  """grad in `dtype` (unchanged when it already is)."""
  if grad is None or grad.dtype == dtype:
    return grad
  return map_values(lambda values: tf.cast(values, dtype), grad)


def zero_unless(finite, grad):
  """grad where `finite` holds, zeros otherwise, so a skipped update writes no NaN."""
  return map_values(lambda values: tf.where(
      finite, values, tf.zeros([], values.dtype)), grad)


def all_finite(grads):
  """One bool: every value of every gradient is finite (None skipped)."""
  checks = [tf.reduce_all(tf.math.is_finite(
      g.values if isinstance(g, tf.IndexedSlices) else g))
            for g in grads if g is not None]
  return tf.reduce_all(tf.stack(checks)) if checks else tf.constant(True)


def merge_duplicates(grad, divisor=None):
  """IndexedSlices with a row's entries summed (dense or None pass as is).

  Merged, a gradient is as large as the rows it touches.

  Args:
    grad: a gradient.
    divisor: when given, the merged values are divided by it.
  """
  if not isinstance(grad, tf.IndexedSlices):
    return grad
  rows, positions = tf.unique(grad.indices)
  values = tf.math.unsorted_segment_sum(grad.values, positions,
                                        tf.shape(rows)[0])
  if divisor is not None:
    values = values / divisor
  return tf.IndexedSlices(values, rows, grad.dense_shape)


def squared_norm(grad):
  """||grad||^2 in float32, as dense (a row's entries summed first)."""
  if isinstance(grad, tf.IndexedSlices):
    values = merge_duplicates(grad).values
    return tf.reduce_sum(tf.square(tf.cast(values, tf.float32)))
  return tf.reduce_sum(tf.square(tf.cast(grad, tf.float32)))


def total_squared_norm(grads):
  """Sum of `squared_norm` over a list of gradients (None skipped)."""
  norms = [squared_norm(g) for g in grads if g is not None]
  return tf.add_n(norms) if norms else tf.constant(0.0)

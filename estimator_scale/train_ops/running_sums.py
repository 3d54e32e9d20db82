"""The accumulation loop's running sums, in TensorLists: loop variables need
a type before the body is traced, the gradients are known only after."""
import tensorflow as tf

from estimator_scale import gradients as gradients_lib


def _static_or_dynamic_shape(variable, row_shape):
  """A sparse gradient's shape as int64 (constant when known); `row_shape` may
  be wider than the variable's (CowClip's counts column)."""
  if variable.shape.is_fully_defined():
    return tf.constant(variable.shape[:1].concatenate(row_shape).as_list(),
                       tf.int64)
  return tf.concat([tf.shape(variable, out_type=tf.int64)[:1],
                    tf.constant(row_shape.as_list(), tf.int64)], 0)


class Sums:
  """The running sums of the loop: which TensorList item holds what.

  Three lists: dense sums, and sparse gradients' rows and values; sparse
  gradient j of micro-batch i sits at j * k + i. A fixed lookup count keeps
  one entry per lookup, a fixed length tf.distribute's exchange needs;
  otherwise rows are merged per micro-batch and again after the loop.
  """

  def __init__(self):
    self.variables = None
    self._kinds = None  # per variable: None, "dense" or "sparse"
    self._lookups = None  # per sparse gradient: entries per micro-batch or None
    self._row_shapes = None  # per sparse gradient: the shape of its rows

  @staticmethod
  def empty():
    """The loop's initial lists: dense sums, sparse rows, sparse values."""
    return [_empty_list(tf.float32), _empty_list(tf.int64),
            _empty_list(tf.float32)]

  def layout(self, grads, variables):
    """Records which gradient goes where; call while tracing the body."""
    self.variables = variables
    self._kinds = [None if g is None else
                   "sparse" if isinstance(g, tf.IndexedSlices) else "dense"
                   for g in grads]
    self._lookups = [g.indices.shape.num_elements() for g in grads
                     if isinstance(g, tf.IndexedSlices)]
    self._row_shapes = [g.values.shape[1:] for g in grads
                        if isinstance(g, tf.IndexedSlices)]

  def add(self, lists, grads, index, k):
    """The lists with micro-batch `index`'s gradients added."""
    sums_list, rows_list, values_list = lists
    dense = [g for g, kind in zip(grads, self._kinds) if kind == "dense"]
    sums_list = _add_items(sums_list, dense, self._dense_shapes())
    sparse = [g for g, kind in zip(grads, self._kinds) if kind == "sparse"]
    if sparse:
      size = k * len(sparse)
      rows_list = tf.raw_ops.TensorListResize(input_handle=rows_list,
                                              size=size)
      values_list = tf.raw_ops.TensorListResize(input_handle=values_list,
                                                size=size)
    for j, grad in enumerate(sparse):
      if self._lookups[j] is None:
        grad = gradients_lib.merge_duplicates(grad)
      position = j * k + index
      rows_list = tf.raw_ops.TensorListSetItem(
          input_handle=rows_list, index=position,
          item=tf.cast(grad.indices, tf.int64))
      values_list = tf.raw_ops.TensorListSetItem(
          input_handle=values_list, index=position,
          item=tf.reshape(grad.values, [-1]))
    return [sums_list, rows_list, values_list]

  def mean_grads(self, lists, k):
    """Per-variable mean gradients (None where there is none) after the loop."""
    sums_list, rows_list, values_list = lists
    totals = iter([tf.raw_ops.TensorListGetItem(
        input_handle=sums_list, index=i, element_shape=shape,
        element_dtype=tf.float32)
                   for i, shape in enumerate(self._dense_shapes())])
    sparse = iter(self._sparse_means(rows_list, values_list, k))
    return [None if kind is None else
            next(totals) / k if kind == "dense" else next(sparse)
            for kind in self._kinds]

  def _dense_shapes(self):
    return [v.shape for v, kind in zip(self.variables, self._kinds)
            if kind == "dense"]

  def _sparse_means(self, rows_list, values_list, k):
    """Each sparse gradient's mean over the k micro-batches."""
    variables = [v for v, kind in zip(self.variables, self._kinds)
                 if kind == "sparse"]
    if not variables:
      return []
    rows, row_counts = _concat(rows_list, tf.int64)
    values, value_counts = _concat(values_list, tf.float32)
    per_gradient = lambda counts: tf.reduce_sum(
        tf.reshape(counts, [len(variables), k]), axis=1)
    row_ends = tf.cumsum(per_gradient(row_counts))
    value_ends = tf.cumsum(per_gradient(value_counts))
    means = []
    for j, (variable, lookups, row_shape) in enumerate(
        zip(variables, self._lookups, self._row_shapes)):
      row_start = row_ends[j - 1] if j else tf.constant(0, tf.int64)
      value_start = value_ends[j - 1] if j else tf.constant(0, tf.int64)
      touched = rows[row_start:row_ends[j]]
      flat = values[value_start:value_ends[j]]
      shape = [-1] + row_shape.as_list()
      if lookups is not None:
        touched.set_shape([k * lookups])
        shape[0] = k * lookups
      grad = tf.IndexedSlices(tf.reshape(flat, shape), touched,
                              _static_or_dynamic_shape(variable, row_shape))
      means.append(gradients_lib.scale(grad, 1.0 / k) if lookups is not None
                   else gradients_lib.merge_duplicates(grad, divisor=k))
    return means


def _concat(handle, dtype):
  """(all items of a list of vectors end to end, each item's length)."""
  return tf.raw_ops.TensorListConcatV2(
      input_handle=handle, element_shape=tf.constant([-1], tf.int64),
      leading_dims=tf.zeros([0], tf.int64), element_dtype=dtype)


def _empty_list(dtype):
  return tf.raw_ops.EmptyTensorList(element_shape=tf.constant(-1),
                                    max_num_elements=-1, element_dtype=dtype)


def _add_items(sums_list, items, shapes):
  """sums_list[i] += items[i] (the first micro-batch finds zeros there)."""
  sums_list = tf.raw_ops.TensorListResize(input_handle=sums_list,
                                          size=len(items))
  for i, (value, shape) in enumerate(zip(items, shapes)):
    previous = tf.raw_ops.TensorListGetItem(
        input_handle=sums_list, index=i, element_shape=shape,
        element_dtype=tf.float32)
    sums_list = tf.raw_ops.TensorListSetItem(
        input_handle=sums_list, index=i, item=previous + value)
  return sums_list

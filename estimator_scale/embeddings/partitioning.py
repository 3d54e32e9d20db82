"""Large variables split over the parameter servers, whatever made them.

Estimator puts each variable whole on one ps task. `get_variable` users
get a scope partitioner; `tf.Variable` users (Keras, v2 columns, canned
estimators) never ask one, so a variable creator splits those into a
`PartitionedVariable` saved as slices. Parts are drawn on their tasks
(`initializers.part_initializer`). One-value variables avoid graph
constants, whose buffer the variable shares until its first sparse update
copies it, holding the slot twice.
"""
import contextlib
import functools
import math
import re

import numpy as np
import tensorflow as tf
from tensorflow.python.ops import variables as tf_variables

from estimator_scale.embeddings import initializers

MIN_SLICE_BYTES = 64 << 20
"""A variable at most this large stays whole (the v1 canned estimators'
`min_slice_size`): splitting small variables only adds requests."""

MAX_PART_BYTES = 8 << 20
"""A part at most this large: a task's transient copies (a sparse update
meeting a checkpoint read, dense optimizer temporaries) are of one part."""


def number_of_parts(shape, dtype, num_ps, min_slice_bytes=MIN_SLICE_BYTES,
                    max_part_bytes=MAX_PART_BYTES):
  """Parts for a variable of `shape` and `dtype` (1: whole): one per ps task
  above `min_slice_bytes`, more per task to stay within `max_part_bytes`,
  never more than rows."""
  if not shape or num_ps < 2 or any(d is None for d in shape):
    return 1
  size = _size(shape, dtype)
  parts = min(num_ps, math.ceil(size / min_slice_bytes))
  if parts > 1 and size > parts * max_part_bytes:
    parts = num_ps * math.ceil(size / (num_ps * max_part_bytes))
  return max(1, min(parts, shape[0]))


def part_rows(rows, parts):
  """Rows of each part: as equal as can be, the first ones one larger."""
  return [rows // parts + (1 if i < rows % parts else 0) for i in range(parts)]


def _size(shape, dtype):
  return math.prod(shape) * tf.as_dtype(dtype).size


def _slice_initial_value(initial_value, full_shape, offset, part_shape):
  """A callable making part `offset` of `initial_value`, a
  `partial(initializer, shape, dtype=)`; None for anything else."""
  if not isinstance(initial_value, functools.partial) or not initial_value.args:
    return None
  return functools.partial(
      initializers.part_initializer(initial_value.func, full_shape, offset),
      part_shape, **initial_value.keywords)


def _one_value(initial_value):
  """`initial_value` via `initializers.filled` where it is a partial of a
  scalar constant, zeros or ones initializer (shape positional or kw)."""
  if not (isinstance(initial_value, functools.partial) and
          (initial_value.args or "shape" in initial_value.keywords)):
    return initial_value
  value = initializers.value_of(initial_value.func)
  if value is None or np.ndim(value) != 0:
    return initial_value
  shape = (initial_value.args[0] if initial_value.args
           else initial_value.keywords["shape"])
  keywords = {k: v for k, v in initial_value.keywords.items()
              if k in ("dtype", "partition_info")}
  return functools.partial(initializers.filled(value.item()), shape,
                           **keywords)


def _split(next_creator, kwargs, full_shape, dtype, parts):
  """One variable's parts via `next_creator`, as a PartitionedVariable; None
  when its initial value cannot be split."""
  name = kwargs.get("name") or "Variable"
  graph = tf.compat.v1.get_default_graph()
  full_name = graph.unique_name(name, mark_as_used=False)
  variables, offset = [], 0
  for i, rows in enumerate(part_rows(full_shape[0], parts)):
    part_shape = [rows] + full_shape[1:]
    initial_value = _slice_initial_value(kwargs["initial_value"], full_shape,
                                         offset, part_shape)
    if initial_value is None:
      return None
    part = next_creator(**dict(kwargs, name=f"{name}/part_{i}",
                               initial_value=initial_value,
                               shape=tf.TensorShape(part_shape)))
    part._set_save_slice_info(tf_variables.Variable.SaveSliceInfo(  # pylint: disable=protected-access
        full_name, full_shape, [offset] + [0] * (len(full_shape) - 1),
        part_shape))
    variables.append(part)
    offset += rows
  return tf_variables.PartitionedVariable(
      name=full_name, shape=full_shape, dtype=dtype,
      variable_list=variables, partitions=[parts] + [1] * (len(full_shape) - 1))


_PART = re.compile(r"/part_\d+(/|$)")


def _full_shape(kwargs):
  shape = kwargs.get("shape")
  if shape is None and isinstance(kwargs.get("initial_value"),
                                  functools.partial):
    args = kwargs["initial_value"].args
    shape = args[0] if args else None
  try:
    shape = tf.TensorShape(shape)
  except (TypeError, ValueError):
    return None
  return shape.as_list() if shape.is_fully_defined() else None


@contextlib.contextmanager
def partitioned_variables(num_ps, min_slice_bytes=MIN_SLICE_BYTES,
                          max_part_bytes=MAX_PART_BYTES):
  """Within it, every variable larger than a slice is made in parts.

  Args:
    num_ps: the job's ps tasks.
    min_slice_bytes: variables up to this size stay whole.
    max_part_bytes: parts are at most this large (`number_of_parts`).

  Yields:
    Nothing; wrap the code that builds the model (a model_fn).
  """
  def creator(next_creator, **kwargs):
    shape = _full_shape(kwargs)
    dtype = kwargs.get("dtype") or tf.float32
    # Parts' slots too: each is no larger than a slice, but all are large.
    kwargs["initial_value"] = _one_value(kwargs.get("initial_value"))
    initial_value = kwargs.get("initial_value")
    if (shape is None or not callable(initial_value) or
        "partition_info" in getattr(initial_value, "keywords", {}) or
        _PART.search(kwargs.get("name") or "")):
      # get_variable's own (the scope's partitioner below has split them),
      # or a part or a part's optimizer slot already.
      return next_creator(**kwargs)
    parts = number_of_parts(shape, dtype, num_ps, min_slice_bytes,
                            max_part_bytes)
    if parts == 1:
      return next_creator(**kwargs)
    return _split(next_creator, kwargs, shape, tf.as_dtype(dtype),
                  parts) or next_creator(**kwargs)

  def partitioner(shape, dtype):
    parts = number_of_parts(shape.as_list(), dtype, num_ps, min_slice_bytes,
                            max_part_bytes)
    return [parts] + [1] * (shape.ndims - 1)

  def partition_aware_getter(getter, *args, **kwargs):
    if (kwargs.get("partitioner") is partitioner and
        callable(kwargs.get("initializer"))):
      kwargs["initializer"] = initializers.partition_aware(
          kwargs["initializer"])
    return getter(*args, **kwargs)

  with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(),
                                   partitioner=partitioner,
                                   custom_getter=partition_aware_getter,
                                   auxiliary_name_scope=False), \
      tf.compat.v1.variable_creator_scope(creator):
    yield

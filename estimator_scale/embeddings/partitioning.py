"""Large variables split over the parameter servers, whatever made them.

Estimator places a parameter-server job's variables round-robin over the
ps tasks, one variable to one task, so a table larger than a task's memory
cannot train and one task holds the whole table and its optimizer slots.
TensorFlow splits a variable only where `get_variable` meets a partitioner
(v1 layers and feature columns): the variable scope gets one. Keras layers,
v2 feature columns (`tf.keras.layers.DenseFeatures`) and the v2 canned
estimators make theirs with `tf.Variable`, which never asks: a variable
creator splits those. Either way a variable larger than a slice becomes
parts along its first axis, one per ps task, held as one
`PartitionedVariable`, which embedding lookups, Keras and the Saver take as
the table it stands for (a checkpoint holds the whole tensor with slice
information, so it restores into any number of parts).

Each part is initialised from its own slice of the initializer, on the ps
task that holds it, so no task ever holds more than its parts.
"""
import contextlib
import functools
import math

import tensorflow as tf
from tensorflow.python.ops import variable_scope as tf_variable_scope
from tensorflow.python.ops import variables as tf_variables

MIN_SLICE_BYTES = 64 << 20
"""A variable at most this large stays whole (the v1 canned estimators'
`min_slice_size`): splitting small variables only adds requests."""


def number_of_parts(shape, dtype, num_ps, min_slice_bytes=MIN_SLICE_BYTES):
  """Parts to split a variable of `shape` and `dtype` into (1: keep whole).

  One part per ps task once the variable is larger than `min_slice_bytes`,
  fewer when it would make parts smaller than that, never more than rows.
  """
  if not shape or num_ps < 2 or any(d is None for d in shape):
    return 1
  size = math.prod(shape) * tf.as_dtype(dtype).size
  return max(1, min(num_ps, math.ceil(size / min_slice_bytes), shape[0]))


def part_rows(rows, parts):
  """Rows of each part: as equal as can be, the first ones one larger."""
  return [rows // parts + (1 if i < rows % parts else 0) for i in range(parts)]


def _slice_initial_value(initial_value, full_shape, offset, part_shape):
  """A zero-argument callable making part `offset` of `initial_value`.

  Variable creators receive `functools.partial(initializer, shape, dtype=)`
  from get_variable, Keras and feature columns alike. Keras initializers
  take the part as `partition_shape`/`partition_offset`, TensorFlow's v1
  ones as `partition_info`; both then draw only the part's values (and
  variance-scaling ones keep the whole variable's fans). None when the
  initial value is of another kind (a tensor): it is not split.
  """
  if not isinstance(initial_value, functools.partial) or not initial_value.args:
    return None
  initializer = initial_value.func
  keywords = dict(initial_value.keywords)
  offsets = [offset] + [0] * (len(full_shape) - 1)
  if isinstance(initializer, tf.keras.initializers.Initializer):
    return functools.partial(initializer, full_shape,
                             partition_shape=part_shape,
                             partition_offset=tuple(offsets), **keywords)
  keywords["partition_info"] = tf_variable_scope._PartitionInfo(  # pylint: disable=protected-access
      full_shape=full_shape, var_offset=offsets)
  return functools.partial(initializer, part_shape, **keywords)


def _split(next_creator, kwargs, full_shape, dtype, parts):
  """The parts of one variable, made through `next_creator`, as one
  PartitionedVariable; None when its initial value cannot be split."""
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
def partitioned_variables(num_ps, min_slice_bytes=MIN_SLICE_BYTES):
  """Within it, every variable larger than a slice is made in parts.

  Args:
    num_ps: the job's ps tasks (parts per large variable).
    min_slice_bytes: variables up to this size stay whole.

  Yields:
    Nothing; wrap the code that builds the model (a model_fn).
  """
  def creator(next_creator, **kwargs):
    shape = _full_shape(kwargs)
    dtype = kwargs.get("dtype") or tf.float32
    initial_value = kwargs.get("initial_value")
    if (shape is None or not callable(initial_value) or "partition_info" in
        getattr(initial_value, "keywords", {})):
      # get_variable's own: the scope's partitioner below has split them.
      return next_creator(**kwargs)
    parts = number_of_parts(shape, dtype, num_ps, min_slice_bytes)
    if parts == 1:
      return next_creator(**kwargs)
    return _split(next_creator, kwargs, shape, tf.as_dtype(dtype),
                  parts) or next_creator(**kwargs)

  def partitioner(shape, dtype):
    parts = number_of_parts(shape.as_list(), dtype, num_ps, min_slice_bytes)
    return [parts] + [1] * (shape.ndims - 1)

  with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(),
                                   partitioner=partitioner,
                                   auxiliary_name_scope=False), \
      tf.compat.v1.variable_creator_scope(creator):
    yield

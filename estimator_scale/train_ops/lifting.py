"""State the network makes inside a traced loop, made in the outer graph,
where Saver, initializers and `tables_initializer` see it."""
import contextlib
import copy

import tensorflow as tf
# The resource creator scope, the one way to intercept a lookup table's
# construction as a variable creator intercepts a variable's, is not public
# API in TensorFlow 2.15 (tf.distribute's own strategies use it).
from tensorflow.python.framework import ops as tf_ops  # pylint: disable=g-direct-tensorflow-import


def _lift_variable(next_creator, **kwargs):
  """Creates a variable in the outermost graph."""
  with tf.init_scope():
    return next_creator(**kwargs)


def _resource_types():
  """Names resource creators register under: every TrackableResource subclass
  loaded by now (a creator applies to one `_resource_type()`)."""
  names, pending = set(), [tf.saved_model.experimental.TrackableResource]
  while pending:
    cls = pending.pop()
    pending.extend(cls.__subclasses__())
    names.add(cls._resource_type())  # pylint: disable=protected-access
  return sorted(names)


def _lifted(value, outer):
  """`value` usable in the outer graph: inline constants are remade there.

  Raises:
    ValueError: the value is computed inside the network at run time.
  """
  if isinstance(value, tf.Tensor):
    if value.graph is outer:
      return value
    static = tf.get_static_value(value)
    if static is None:
      raise ValueError(
          f"a lookup table made inside the network is built from "
          f"{value.name}, which the network computes at run time; "
          "accumulation_steps > 1 makes the table once, outside the loop over "
          "micro-batches, so build it from constants (or a vocabulary file), "
          "make it before the network runs, or use accumulation_steps=1")
    with tf.init_scope():
      return tf.constant(static, dtype=value.dtype)
  attributes = getattr(value, "__dict__", None)
  if not attributes or isinstance(value, type):
    return value
  inner = {name: item for name, item in attributes.items()
           if isinstance(item, tf.Tensor) and item.graph is not outer}
  if not inner:
    return value
  lifted = copy.copy(value)
  for name, item in inner.items():
    setattr(lifted, name, _lifted(item, outer))
  return lifted


def _lift_resource(next_creator, *args, **kwargs):
  """Creates a resource (a lookup table) and its initializer in the outermost graph."""
  with tf.init_scope():
    outer = tf.compat.v1.get_default_graph()
  args, kwargs = tf.nest.map_structure(lambda v: _lifted(v, outer),
                                       (args, kwargs))
  with tf.init_scope():
    return next_creator(*args, **kwargs)


@contextlib.contextmanager
def lift_to_outer_graph():
  """Variables and resources made inside the `with` go to the outermost graph;
  enter it inside the function graph being traced."""
  with contextlib.ExitStack() as stack:
    stack.enter_context(tf.variable_creator_scope(_lift_variable))
    for name in _resource_types():
      stack.enter_context(tf_ops.resource_creator_scope(name, _lift_resource))
    yield

"""A model's linear part, trained by an optimizer of its own.

FTRL suits a wide part but cannot train a deep one: its weights depend on
gradient sums only, so its first update zeroes hidden layers for good.
Variables are marked by creation, so the mark follows them anywhere.
"""
import contextlib

from absl import logging
import tensorflow as tf
from tensorflow.python.ops import variables as tf_variables  # pylint: disable=g-direct-tensorflow-import

from estimator_scale import errors
from estimator_scale import graph_state
from estimator_scale.train_ops import optimizers

_WARNED = set()  # the variables a warning named, once per process


def _outermost(graph):
  """The graph a function graph (the accumulation loop's body) is in."""
  while getattr(graph, "outer_graph", None) is not None:
    graph = graph.outer_graph
  return graph


def _linear_names():
  return graph_state.of(
      _outermost(tf.compat.v1.get_default_graph())).linear_variables


@contextlib.contextmanager
def linear_part():
  """Within it, every variable made belongs to the model's linear part."""
  def creator(next_creator, **kwargs):
    variable = next_creator(**kwargs)
    made = [variable]
    if isinstance(variable, tf_variables.PartitionedVariable):
      made = list(variable)
    elif isinstance(variable, tf.distribute.DistributedValues):
      # Each replica's own, which its update gets; the first is the
      # variable's name.
      made = list(variable.values)
    mark_linear(made)
    return variable

  with tf.compat.v1.variable_creator_scope(creator):
    yield


def mark_linear(variables):
  """Counts `variables` in the linear part (canned ones: out of its reach)."""
  _linear_names().update(v.name for v in variables)


def is_linear(variable):
  """Whether `variable` was made inside `linear_part()` in this graph."""
  return variable.name in _linear_names()


class PerPartOptimizer(tf.compat.v1.train.Optimizer):
  """`part` for the variables `in_part` names (by name: it may get a handle),
  `rest` for others, as one v1 optimizer; global step advances once."""

  def __init__(self, part, rest, in_part=is_linear):
    super().__init__(use_locking=False, name="PerPart")
    self.part, self.rest = part, rest
    self._in_part = in_part
    self._active = ()

  def optimizer_of(self, variable):
    """The optimizer that updates `variable`."""
    return self.part if self._in_part(variable) else self.rest

  def _create_slots(self, var_list):
    # An optimizer is prepared and finished only where it has variables:
    # Adam's state is placed beside its first one.
    owned = {id(self.part): [], id(self.rest): []}
    for variable in var_list:
      owned[id(self.optimizer_of(variable))].append(variable)
    self._active = [o for o in (self.part, self.rest) if owned[id(o)]]
    for optimizer in self._active:
      optimizer._create_slots(owned[id(optimizer)])  # pylint: disable=protected-access
  def _prepare(self):
    for optimizer in self._active:
      optimizer._prepare()  # pylint: disable=protected-access

  def _apply_dense(self, grad, var):
    return self.optimizer_of(var)._apply_dense(grad, var)  # pylint: disable=protected-access

  def _resource_apply_dense(self, grad, handle):
    return self.optimizer_of(handle)._resource_apply_dense(grad, handle)  # pylint: disable=protected-access

  # Sparse gradients go to each optimizer's own handling of repeated
  # indices (SGD sums them in its scatter, the others merge them first).
  def _apply_sparse_duplicate_indices(self, grad, var):
    return self.optimizer_of(var)._apply_sparse_duplicate_indices(grad, var)  # pylint: disable=protected-access

  def _resource_apply_sparse_duplicate_indices(self, grad, handle, indices):
    return self.optimizer_of(handle)._resource_apply_sparse_duplicate_indices(  # pylint: disable=protected-access
        grad, handle, indices)

  def _finish(self, update_ops, name_scope):
    return tf.group(*[optimizer._finish(update_ops, f"{name_scope}_{i}")  # pylint: disable=protected-access
                      for i, optimizer in enumerate(self._active)],
                    name=name_scope)

  def get_slot_names(self):
    """See base class: both optimizers' slots."""
    return sorted(set(self.part.get_slot_names()) |
                  set(self.rest.get_slot_names()))

  def get_slot(self, var, name):
    """See base class: the slot of `var`'s own optimizer."""
    return self.optimizer_of(var).get_slot(var, name)

  def variables(self):
    """See base class: both optimizers' variables."""
    return self.part.variables() + self.rest.variables()


def each_optimizer(optimizer):
  """The v1 optimizers that `optimizer` applies (itself if it is one)."""
  if isinstance(optimizer, PerPartOptimizer):
    return each_optimizer(optimizer.part) + each_optimizer(optimizer.rest)
  return [optimizer]


def hidden_layer_weights(grads, variables):
  """The first layer weights outside the linear part when there are several
  (rank >= 2, dense gradient); None otherwise."""
  weights = [v for g, v in zip(grads, variables)
             if g is not None and not isinstance(g, tf.IndexedSlices) and
             v.shape.rank is not None and v.shape.rank >= 2 and
             not is_linear(v)]
  return weights[0] if len(weights) > 1 else None


def make_optimizer(config, learning_rate, grads, variables):
  """The update's optimizer, with the linear part's own if configured; warns
  once where FTRL would train a hidden layer.

  Raises:
    ConfigError: a linear optimizer for a model that marks no linear part.
  """
  rest = optimizers.make_optimizer(config.optimizer, learning_rate,
                                   **dict(config.optimizer_options))
  if config.optimizer == "ftrl":
    hidden = hidden_layer_weights(grads, variables)
    if hidden is not None and hidden.name not in _WARNED:
      _WARNED.add(hidden.name)
      logging.warning(
          "optimizer='ftrl' trains %s, a hidden layer's weights: FTRL's "
          "weights do not depend on their initial values, so its hidden "
          "layers start from zero and the network does not learn. Give the "
          "deep part another optimizer and FTRL the linear part, built in "
          "estimator_scale.linear_part(): --optimizer=adagrad "
          "--linear_optimizer=ftrl", hidden.op.name)
  if config.linear_optimizer is None:
    return rest
  if not any(is_linear(v) for v in variables):
    raise errors.ConfigError(
        f"linear_optimizer={config.linear_optimizer!r}, but the model "
        "builds no variable inside estimator_scale.linear_part(): mark its "
        "linear part there, or leave linear_optimizer unset")
  linear = optimizers.make_optimizer(config.linear_optimizer, learning_rate,
                                     **dict(config.linear_optimizer_options))
  return PerPartOptimizer(linear, rest)

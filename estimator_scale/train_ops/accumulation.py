"""k micro-batches, one gradient: an in-graph loop inside a single session run.

One run per update keeps one pass of every hook and one exchange per
update, lets `global_step` count updates without a conditional apply
(which tf.distribute cannot express), and no checkpoint falls mid-update.
The body is traced once; what it creates is lifted to the outer graph
(`lifting.py`), state writes are made to run, and sums live in TensorLists
(`running_sums.py`). parallel_iterations=1 keeps one micro-batch's
activations alive at a time.
"""
import dataclasses
from typing import Any, List, Optional

from absl import logging
import tensorflow as tf

from estimator_scale.embeddings import sharded
from estimator_scale.train_ops import cowclip
from estimator_scale import gradients as gradients_lib
from estimator_scale.train_ops import lifting
from estimator_scale.train_ops import running_sums

# Op types that write a variable (resource and reference variables), and
# ops whose functions may (a tf.cond on a tensor `training`, a tf.function).
_WRITE_PREFIXES = ("Assign", "ResourceScatter", "Scatter")
_MAY_WRITE = ("If", "While", "Case", "StatefulPartitionedCall")


@dataclasses.dataclass
class Gradients:
  """What a replica computed for one update.

  Attributes:
    grads: per-variable float32 mean over the k micro-batches (None where
      the loss does not depend on it).
    variables: the variables differentiated, in the order of `grads`.
    loss: mean of the micro-batch losses.
    sum_squared_norms: sum over micro-batches of ||g_j||^2, or None.
  """
  grads: List[Optional[Any]]
  variables: List[tf.Variable]
  loss: tf.Tensor
  sum_squared_norms: Optional[tf.Tensor]


@dataclasses.dataclass
class _MicroBatch:
  loss: tf.Tensor
  grads: List[Optional[Any]]
  variables: List[tf.Variable]
  squared_norm: Optional[tf.Tensor]


def _micro_batch(compute_loss, features, labels, with_norms, loss_scale,
                 norm_groups=None, with_counts=False):
  """Loss, unscaled gradients (a non-finite one stays so through the sums,
  for one check per update) and squared norm of one micro-batch."""
  graph = tf.compat.v1.get_default_graph()
  first_op = len(graph.get_operations())
  first_lookup = len(sharded.lookups(graph))
  loss = compute_loss(features, labels)
  if loss.shape.num_elements() != 1:
    raise ValueError(f"the loss function must return a scalar (the batch's "
                     f"mean loss), got shape {loss.shape}")
  loss = tf.reshape(tf.cast(loss, tf.float32), [])
  writes = _pending_writes(graph.get_operations()[first_op:], [loss])
  with tf.control_dependencies(writes):
    loss = tf.identity(loss)
  variables = tf.compat.v1.trainable_variables()
  target = loss if loss_scale is None else loss * loss_scale
  # A sharded table's own part of the norm is the gradient of the vectors
  # it looked up, before the exchange (embeddings/sharded.py).
  lookups = sharded.lookups(graph)[first_lookup:] if with_norms else []
  grads = [gradients_lib.cast(g, tf.float32) for g in tf.gradients(
      target, variables + [lookup.vectors for lookup in lookups])]
  if loss_scale is not None:
    grads = [gradients_lib.scale(g, 1.0 / loss_scale) for g in grads]
  grads, vector_grads = grads[:len(variables)], grads[len(variables):]
  if with_counts:
    grads = [cowclip.with_counts(g, v) for g, v in zip(grads, variables)]
  norm = None
  if with_norms and norm_groups is not None:
    norm = _group_norms(grads, variables, norm_groups(grads, variables))
  elif with_norms:
    norm = sharded.replica_squared_norm(grads, variables, lookups,
                                        vector_grads)
  return _MicroBatch(loss, grads, variables, norm)


def _group_norms(grads, variables, groups):
  """||g||^2 of each group of variables, as one vector."""
  by_variable = {v.ref(): g for g, v in zip(grads, variables)}
  return tf.stack([gradients_lib.total_squared_norm(
      [by_variable.get(v.ref()) for v in group]) for group in groups])


def _pending_writes(ops, outputs):
  """The variable writes among `ops` that `outputs` do not wait for (Keras
  `add_update`, v1 UPDATE_OPS); initializers are not network writes."""
  # A distributed variable's `initializer` makes a new op on every read;
  # its components' are plain attributes.
  initializers = {part.initializer
                  for v in tf.compat.v1.global_variables() +
                  tf.compat.v1.local_variables()
                  for part in getattr(v, "values", None) or (v,)}
  needed, frontier = set(), [t.op for t in outputs]
  while frontier:
    op = frontier.pop()
    if op not in needed:
      needed.add(op)
      frontier.extend(t.op for t in op.inputs)
      frontier.extend(op.control_inputs)
  return [op for op in ops
          if (op.type.startswith(_WRITE_PREFIXES) or op.type in _MAY_WRITE)
          and op not in needed and op not in initializers]


def _slice(tensor, index, k):
  """Micro-batch `index` of k (rows index*m .. (index+1)*m) of one tensor."""
  if isinstance(tensor, tf.SparseTensor):
    rows = tensor.dense_shape[0] // k
    start = tf.concat([[tf.cast(index, tf.int64) * rows],
                       tf.zeros_like(tensor.dense_shape[1:])], 0)
    return tf.sparse.slice(tensor, start,
                           tf.concat([[rows], tensor.dense_shape[1:]], 0))
  if isinstance(tensor, tf.RaggedTensor):
    rows = tensor.nrows() // k
    index = tf.cast(index, rows.dtype)
    return tensor[index * rows:(index + 1) * rows]
  rows = tf.shape(tensor)[0] // k
  part = tensor[index * rows:(index + 1) * rows]
  if tensor.shape.rank:
    batch = tensor.shape[0]
    part.set_shape([None if batch is None else batch // k] +
                   tensor.shape[1:].as_list())
  return part


def _check_divisible(nest, k):
  """Fails at build time when a batch cannot split into k micro-batches;
  returns assertions for batch sizes known only at run time."""
  checks = []
  for tensor in tf.nest.flatten(nest, expand_composites=False):
    if tensor is None:
      continue
    if tensor.shape.rank == 0:
      raise ValueError(
          f"accumulation_steps={k} needs a batch axis on every feature and "
          f"label; {tensor.name} is a scalar")
    batch = tensor.shape[0] if tensor.shape.rank else None
    message = (f"accumulation_steps={k} does not divide the replica's batch "
               "of {} examples; the input_fn must give each replica a "
               f"multiple of {k} examples per update (the framework's input "
               "builders do, given the same accumulation_steps)")
    if batch is not None:
      if batch % k:
        raise ValueError(message.format(batch))
      continue
    rows = (tensor.dense_shape[0] if isinstance(tensor, tf.SparseTensor) else
            tensor.nrows() if isinstance(tensor, tf.RaggedTensor) else
            tf.shape(tensor, out_type=tf.int64)[0])
    checks.append(tf.debugging.assert_equal(
        rows % k, tf.constant(0, tf.int64),
        message=message.format("a size that is not a multiple")))
  return checks


def _drop_from_collections(graph):
  """Removes what the loop put in the outer graph's (shared) collections.

  Raises:
    ValueError: a lookup table is made inside a tf.cond or tf.function of
      the network, which cannot be lifted out.
  """
  quiet = (tf.compat.v1.GraphKeys.UPDATE_OPS, tf.compat.v1.GraphKeys.LOSSES,
           tf.compat.v1.GraphKeys.REGULARIZATION_LOSSES)
  for key in graph.get_all_collection_keys():
    kept, dropped = [], []
    for item in graph.get_collection_ref(key):
      (dropped if getattr(item, "graph", graph) is not graph else
       kept).append(item)
    if dropped and key == tf.compat.v1.GraphKeys.TABLE_INITIALIZERS:
      raise ValueError(
          "the network creates a lookup table inside a tf.cond or "
          "tf.function of its own, which accumulation_steps > 1 cannot lift "
          "out of its loop over micro-batches; create the table (tf.lookup, "
          "a StringLookup layer, a vocabulary feature column) outside that "
          "function, or use accumulation_steps=1")
    if dropped and key not in quiet:
      logging.warning(
          "accumulation: %d item(s) the network added to the %r collection "
          "(%s) stay inside its loop when accumulation_steps > 1 and are "
          "dropped; compute them outside the network (e.g. in a training "
          "hook) or use accumulation_steps=1", len(dropped), key,
          ", ".join(getattr(t, "name", repr(t)) for t in dropped))
    graph.get_collection_ref(key)[:] = kept


def accumulate(compute_loss, features, labels, k, with_norms=False,
               loss_scale=None, norm_groups=None, with_counts=False):
  """Mean gradient of k micro-batches of (features, labels).

  Args:
    compute_loss: (features, labels) -> scalar mean loss; builds the network.
    features, labels: k micro-batches along the first axis; labels may be
      None.
    k: accumulation steps.
    with_norms: also sum the micro-batch gradients' squared norms.
    loss_scale: scalar multiplying the loss, or None; returns unscaled.
    norm_groups: with `with_norms`, (grads, variables) -> lists of variables
      whose squared norms are summed apart.
    with_counts: give sparse gradients CowClip's count column.

  Returns:
    `Gradients`.

  Raises:
    ValueError: the batch does not split into k micro-batches.
  """
  if k == 1:
    micro = _micro_batch(compute_loss, features, labels, with_norms,
                         loss_scale, norm_groups, with_counts)
    return Gradients(micro.grads, micro.variables, micro.loss,
                     micro.squared_norm)
  checks = _check_divisible((features, labels), k)
  sums = running_sums.Sums()
  graph = tf.compat.v1.get_default_graph()
  # The loop's graph starts at the root name scope; Keras names variables
  # after the name scope, so the caller's is entered again inside.
  scope = graph.get_name_scope()

  def body(index, loss_sum, norm_sum, *lists):
    features_j, labels_j = tf.nest.map_structure(
        lambda t: None if t is None else _slice(t, index, k),
        (features, labels))
    with lifting.lift_to_outer_graph(), \
        tf.compat.v1.name_scope(scope + "/" if scope else None):
      micro = _micro_batch(compute_loss, features_j, labels_j, with_norms,
                           loss_scale, norm_groups, with_counts)
    sums.layout(micro.grads, micro.variables)
    norm = micro.squared_norm if with_norms else 0.0
    return [index + 1, loss_sum + micro.loss, norm_sum + norm] + sums.add(
        lists, micro.grads, index, k)

  with tf.control_dependencies(checks):
    first = tf.constant(0)
  initial = [first, tf.constant(0.0), tf.constant(0.0)] + sums.empty()
  invariants = None
  if norm_groups is not None:
    # One norm per group: how many is known once the body is traced.
    invariants = [None] * len(initial)
    invariants[2] = tf.TensorShape(None)
  _, loss_sum, norm_sum, *lists = tf.while_loop(
      lambda index, *_: index < k, body, initial,
      shape_invariants=invariants, maximum_iterations=k,
      parallel_iterations=1, name="accumulation")
  _drop_from_collections(graph)
  return Gradients(grads=sums.mean_grads(lists, k), variables=sums.variables,
                   loss=loss_sum / k,
                   sum_squared_norms=norm_sum if with_norms else None)

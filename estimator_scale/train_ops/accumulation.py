"""k micro-batches, one gradient: accumulation inside a single session run.

One session run reads the replica's whole share of the update (k
micro-batches), and computes the micro-batch gradients one after another,
each chained behind the previous one so only one micro-batch's activations
are alive at a time. The optimizer applies once per run, so `global_step`
counts updates and no conditional apply (which tf.distribute cannot express
inside a replica) is needed.
"""
import dataclasses
from typing import Any, List, Optional

import tensorflow as tf


@dataclasses.dataclass
class Gradients:
  """What a replica computed for one update.

  Attributes:
    grads: per-variable mean over the k micro-batches (None where the loss
      does not depend on the variable); dense ones in float32.
    variables: the variables differentiated, in the order of `grads`.
    loss: mean of the micro-batch losses.
    sum_squared_norms: sum over micro-batches of ||g_j||^2 (float32), or None
      when not asked for.
    update_ops: UPDATE_OPS (e.g. batch-norm statistics) the forward passes
      created.
  """
  grads: List[Optional[Any]]
  variables: List[tf.Variable]
  loss: tf.Tensor
  sum_squared_norms: Optional[tf.Tensor]
  update_ops: List[tf.Operation]


def split(tensors, k):
  """Splits every tensor of a nest along the batch axis into k equal parts."""
  if k == 1 or tensors is None:
    return [tensors] * k
  flat = [tf.split(t, k, axis=0) for t in tf.nest.flatten(tensors)]
  return [tf.nest.pack_sequence_as(tensors, [parts[j] for parts in flat])
          for j in range(k)]


def squared_norm(grad):
  """||grad||^2 in float32; duplicate indices of IndexedSlices are summed first."""
  if isinstance(grad, tf.IndexedSlices):
    unique, positions = tf.unique(grad.indices)
    values = tf.math.unsorted_segment_sum(grad.values, positions,
                                          tf.shape(unique)[0])
    return tf.reduce_sum(tf.square(tf.cast(values, tf.float32)))
  return tf.reduce_sum(tf.square(tf.cast(grad, tf.float32)))


def total_squared_norm(grads):
  norms = [squared_norm(g) for g in grads if g is not None]
  return tf.add_n(norms) if norms else tf.constant(0.0)


def _add(total, grad):
  if grad is None:
    return total
  if isinstance(grad, tf.IndexedSlices):
    values = tf.cast(grad.values, tf.float32)
    if total is None:
      return tf.IndexedSlices(values, grad.indices, grad.dense_shape)
    return tf.IndexedSlices(tf.concat([total.values, values], 0),
                            tf.concat([total.indices, grad.indices], 0),
                            grad.dense_shape)
  return tf.cast(grad, tf.float32) if total is None else total + tf.cast(
      grad, tf.float32)


def _scale(grad, factor):
  if grad is None or factor == 1:
    return grad
  if isinstance(grad, tf.IndexedSlices):
    return tf.IndexedSlices(grad.values * factor, grad.indices,
                            grad.dense_shape)
  return grad * factor


def _after(deps, nest):
  """Makes every tensor of `nest` wait for `deps` (serialises micro-batches)."""
  if not deps or nest is None:
    return nest
  with tf.control_dependencies(deps):
    return tf.nest.map_structure(tf.identity, nest)


def accumulate(compute_loss, features, labels, k, with_norms=False):
  """Mean gradient of k micro-batches of (features, labels).

  Args:
    compute_loss: (features, labels) -> scalar mean loss of that batch.
    features, labels: the replica's share of one update, batch k x micro.
      The first micro-batch builds the network; the trainable variables are
      read after it.
    k: accumulation steps.
    with_norms: also sum the squared norms of the k micro-batch gradients
      (AdaScale's variance estimate needs them).

  Returns:
    `Gradients`.
  """
  total, losses, norms, update_ops, previous = None, [], [], [], []
  variables = None
  micro = zip(split(features, k), split(labels, k))
  for features_j, labels_j in micro:
    features_j, labels_j = _after(previous, (features_j, labels_j))
    before = set(tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS))
    loss = compute_loss(features_j, labels_j)
    update_ops += [op for op in tf.compat.v1.get_collection(
        tf.compat.v1.GraphKeys.UPDATE_OPS) if op not in before]
    if variables is None:
      variables = tf.compat.v1.trainable_variables()
    elif len(tf.compat.v1.trainable_variables()) != len(variables):
      raise ValueError(
          "the model created new variables for micro-batch 2 of "
          f"{k}: with accumulation its network is called once per "
          "micro-batch and must reuse its variables (name every layer, or "
          "create variables with tf.compat.v1.get_variable)")
    grads = tf.gradients(loss, variables)
    losses.append(loss)
    if with_norms:
      norms.append(total_squared_norm(grads))
    if k == 1:
      total = grads
    else:
      total = [_add(t, g) for t, g in zip(total or [None] * len(grads), grads)]
    previous = [g.values if isinstance(g, tf.IndexedSlices) else g
                for g in grads if g is not None] + [loss]
  mean = [_scale(g, 1.0 / k) for g in total]
  return Gradients(
      grads=mean,
      variables=variables,
      loss=losses[0] if k == 1 else tf.add_n(losses) / k,
      sum_squared_norms=tf.add_n(norms) if with_norms else None,
      update_ops=update_ops)

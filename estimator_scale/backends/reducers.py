"""Cross-worker reduction: the only train-op code that differs per backend.

Each Backend makes its reducer (`Backend.make_reducer`), so the train-op
pipeline never asks which backend runs; Horovod's lives in
`backends/horovod/`.

Every reducer offers the same two operations on a replica's mean gradient:
`apply_mean` (average over all replicas, then apply: the plain path) and
`all_mean` + `apply_reduced` (average first so the caller can look at the
global gradient, as AdaScale must, then apply it).
"""
import tensorflow as tf

from estimator_scale.train_ops import gradients


def pairs(grads, variables):
  return [(gradients.cast(g, v.dtype.base_dtype), v)
          for g, v in zip(grads, variables)
          if g is not None]


class LocalReducer:
  """One replica, or asynchronous workers (parameter servers): nothing to do."""

  applies_updates = True
  """Whether this worker applies updates; a synchronous parameter server's
  workers other than the chief only contribute their gradients."""

  def expect(self, variables, loss):
    """Names the variables of the gradients the next `all_mean` gets and
    the loss they are of (a reducer that keeps state beside the variables
    places it there, and waits for the loss)."""
    del variables, loss  # nothing kept

  def all_mean(self, grads, sums):
    """Averages `grads` and sums the scalars `sums` over all replicas.

    Returns:
      (mean grads, summed scalars), identical on every replica.
    """
    return list(grads), list(sums)

  def each_worker(self, value, replicas_per_worker):
    """Every worker's scalar `value`, in worker order, on every worker.

    A worker of several replicas contributes their mean. Here: this
    worker's own (asynchronous workers exchange nothing).

    Returns:
      A function returning a float32 vector with one entry per worker; call
      it once this update's exchange (`all_mean` or `apply_mean`) is built,
      since a backend may carry the value in that exchange.
    """
    del replicas_per_worker  # one worker, however many replicas
    mine = tf.reshape(tf.cast(value, tf.float32), [1])
    return lambda: mine

  def applied(self, update):
    """The op that ends an update once `update` (the optimizer's apply of
    `all_mean`'s result) ran; here `update` itself."""
    return update

  def apply_reduced(self, optimizer, grads, variables, global_step):
    """Applies gradients that are already the global mean."""
    return optimizer.apply_gradients(pairs(grads, variables),
                                     global_step=global_step)

  def apply_mean(self, optimizer, grads, variables, global_step):
    """Averages a replica's gradients over all replicas and applies them."""
    grads, _ = self.all_mean(grads, [])
    return self.apply_reduced(optimizer, grads, variables, global_step)


def _steady_shapes(grads):
  """The gradients with a sparse one of varying length made dense.

  TensorFlow 2.15's collectives in graph mode keep the shape an exchange had
  at its first step: an IndexedSlices whose number of entries changes from
  step to step (a feature column's embedding, whose lookups are merged at
  run time) fails the next step with "Shape mismatch in the collective",
  even at accumulation_steps=1. One whose length is fixed in the graph (an
  embedding lookup of a fixed number of ids) stays sparse. The dense one is
  the sum of the entries per row, so the mean and AdaScale's norms do not
  change; the optimizer then updates every row, as Horovod's
  sparse_as_dense does: SGD, Adagrad and FTRL leave rows without gradient
  where they were, momentum and Adam move them by their slots.
  """
  steady = []
  for grad in grads:
    if (isinstance(grad, tf.IndexedSlices) and
        grad.indices.shape.num_elements() is None):
      rows = tf.cast(grad.dense_shape[0], tf.int32)
      grad = tf.math.unsorted_segment_sum(grad.values, grad.indices, rows)
    steady.append(grad)
  return steady


class StrategyReducer(LocalReducer):
  """tf.distribute replicas (mirrored, multi_worker_mirrored).

  v1 `apply_gradients` in a replica context sums the gradients of all
  replicas before applying, so handing it g / N applies the mean. The
  gradients here come from `tf.gradients` of each replica's own mean loss,
  without the 1/N that `compute_gradients` would have put on the loss.
  Sparse gradients of varying length are exchanged dense (`_steady_shapes`).
  """

  def _replicas(self):
    return tf.distribute.get_replica_context().num_replicas_in_sync

  def all_mean(self, grads, sums):
    """See base class."""
    context = tf.distribute.get_replica_context()
    grads = _steady_shapes(grads)
    n = float(context.num_replicas_in_sync)
    present = [i for i, g in enumerate(grads) if g is not None]
    reduced = context.all_reduce(
        tf.distribute.ReduceOp.SUM,
        [gradients.scale(grads[i], 1.0 / n) for i in present] + list(sums))
    means = [None] * len(grads)
    for i, g in zip(present, reduced):
      means[i] = g
    return means, reduced[len(present):]

  def each_worker(self, value, replicas_per_worker):
    """See base class.

    Each replica puts its value at its own place in a vector of zeros and
    the vectors are summed by the same collective all-reduce the gradients
    use; replicas are numbered worker by worker.
    """
    context = tf.distribute.get_replica_context()
    n = context.num_replicas_in_sync
    mine = tf.one_hot(context.replica_id_in_sync_group, n,
                      dtype=tf.float32) * tf.cast(value, tf.float32)
    summed = context.all_reduce(tf.distribute.ReduceOp.SUM, mine)
    means = tf.reduce_mean(tf.reshape(summed, [-1, replicas_per_worker]), 1)
    return lambda: means

  def apply_reduced(self, optimizer, grads, variables, global_step):
    """See base class."""
    n = float(self._replicas())
    return optimizer.apply_gradients(
        pairs([gradients.scale(g, 1.0 / n) for g in grads],
               variables),
        global_step=global_step)

  def apply_mean(self, optimizer, grads, variables, global_step):
    """See base class."""
    grads = _steady_shapes(grads)
    return self.apply_reduced(optimizer, grads, variables, global_step)



"""Cross-worker reduction: the only train-op code that differs per backend.

`all_mean` + `apply_reduced` show the global gradient before applying,
as AdaScale needs.
"""
import tensorflow as tf

from estimator_scale import gradients


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
    """Names the next `all_mean`'s variables and loss, for stateful reducers."""
    del variables, loss  # nothing kept

  def all_mean(self, grads, sums):
    """(mean `grads`, summed `sums`) over all replicas, the same on each."""
    return list(grads), list(sums)

  def each_worker(self, value, replicas_per_worker):
    """Every worker's scalar `value`, in worker order, as a function to call
    once this update's exchange (which may carry it) is built."""
    del replicas_per_worker  # one worker, however many replicas
    mine = tf.reshape(tf.cast(value, tf.float32), [1])
    return lambda: mine

  def applied(self, update):
    """The op that ends an update once `update` ran; here `update` itself."""
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
  """The gradients with varying-length sparse ones made dense: TF 2.15's
  graph-mode collectives keep an exchange's first shape."""
  steady = []
  for grad in grads:
    if (isinstance(grad, tf.IndexedSlices) and
        grad.indices.shape.num_elements() is None):
      rows = tf.cast(grad.dense_shape[0], tf.int32)
      grad = tf.math.unsorted_segment_sum(grad.values, grad.indices, rows)
    steady.append(grad)
  return steady


class StrategyReducer(LocalReducer):
  """tf.distribute replicas: v1 `apply_gradients` sums the replicas'
  gradients, so it is handed g / N."""

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
    """See base class: one-hot per replica, summed with the gradients."""
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



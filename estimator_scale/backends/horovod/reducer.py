"""Horovod's reduction of one update: a grouped allreduce for everything."""
import tensorflow as tf

from estimator_scale import choices
from estimator_scale.backends import reducers
from estimator_scale.embeddings import shard_updates
from estimator_scale.embeddings import sharded
from estimator_scale import gradients


def _grouped_sum(hvd, tensors):
  """Sums `tensors` over the ranks: one grouped allreduce per dtype, in
  first-appearance order (the same on every rank)."""
  summed = [None] * len(tensors)
  for dtype in dict.fromkeys(t.dtype for t in tensors):
    indices = [i for i, t in enumerate(tensors) if t.dtype == dtype]
    for i, total in zip(indices, hvd.grouped_allreduce(
        [tensors[i] for i in indices], op=hvd.Sum)):
      summed[i] = total
  return summed


def _empty_like(tensor):
  """A tensor of `tensor`'s dtype and trailing shape with no rows."""
  return tf.zeros(tf.concat([[0], tf.shape(tensor)[1:]], 0), tensor.dtype)


class _SparseExchange:
  """One sparse gradient's way through the exchange; the way not taken sends
  no rows, so no collective sits inside a tf.cond."""

  def __init__(self, grad, ranks, mode):
    self._merged = gradients.merge_duplicates(grad)
    self._ranks = ranks
    self._dense_shape = grad.dense_shape
    self._rows = tf.cast(grad.dense_shape[0], tf.int32)
    self.rows_sent = tf.cast(tf.size(self._merged.indices), tf.float32)
    self._gathered_before = None
    if mode == "auto":
      # Reset with the graph's local variables; every rank starts at 0.
      self._gathered_before = tf.compat.v1.Variable(
          0.0, trainable=False, name="sparse_exchange/rows_gathered",
          collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])
      self.use_dense = (self._gathered_before.read_value() >
                        tf.cast(self._rows, tf.float32))
    else:
      self.use_dense = mode == "dense"

  def _choose(self, dense, sparse):
    """dense() or sparse(), as decided: in Python when fixed, else a tf.cond."""
    if isinstance(self.use_dense, bool):
      return dense() if self.use_dense else sparse()
    return tf.cond(self.use_dense, dense, sparse)

  def dense_payload(self):
    """(summed values / ranks, touched-row counts), or empty when sparse."""
    values, rows = self._merged.values, self._merged.indices

    def full():
      return (tf.math.unsorted_segment_sum(values / self._ranks, rows,
                                           self._rows),
              tf.math.unsorted_segment_sum(tf.ones_like(rows, tf.float32),
                                           rows, self._rows))

    def empty():
      shape = tf.concat([[0], tf.shape(values)[1:]], 0)
      return tf.zeros(shape, values.dtype), tf.zeros([0], tf.float32)

    if isinstance(self.use_dense, bool) and not self.use_dense:
      return None
    return self._choose(full, empty)

  def sparse_payload(self):
    """(values / ranks, rows) to allgather, or empty when dense."""
    values, rows = self._merged.values, self._merged.indices
    if isinstance(self.use_dense, bool) and self.use_dense:
      return None
    return self._choose(lambda: (_empty_like(values), rows[:0]),
                        lambda: (values / self._ranks, rows))

  def mean(self, dense_sums, gathered, rows_gathered):
    """The global mean, one entry per row touched; stores `rows_gathered`."""

    def from_dense():
      total, touched = dense_sums
      rows = tf.where(touched > 0.0)[:, 0]
      return tf.gather(total, rows), tf.cast(rows, self._merged.indices.dtype)

    def from_sparse():
      merged = gradients.merge_duplicates(
          tf.IndexedSlices(gathered[0], gathered[1], self._dense_shape))
      return merged.values, merged.indices

    values, rows = self._choose(from_dense, from_sparse)
    if self._gathered_before is not None:
      # The choice above read the previous count; this update's replaces it.
      with tf.control_dependencies([self.use_dense]):
        stored = self._gathered_before.assign(rows_gathered)
      with tf.control_dependencies([stored]):
        values = tf.identity(values)
    return tf.IndexedSlices(values, rows, self._dense_shape)


class HorovodReducer(reducers.LocalReducer):
  """Horovod ranks: one grouped allreduce per update, `stop_flag` included."""

  def __init__(self, hvd, compression, stop_flag, sparse_exchange="auto"):
    if sparse_exchange not in choices.SPARSE_EXCHANGES:
      raise ValueError(f"sparse_exchange={sparse_exchange!r} is unknown; "
                       f"valid: {', '.join(choices.SPARSE_EXCHANGES)}")
    self._hvd = hvd
    self._compression = {"none": hvd.Compression.none,
                         "fp16": hvd.Compression.fp16}[compression]
    self._stop_flag = stop_flag
    self._sparse_exchange = sparse_exchange
    self._riders = []
    self._owned = ()

  def expect(self, variables, loss):
    """See base class; sharded tables' gradients stay out of the exchange."""
    del loss  # nothing waits for it
    self._owned = [sharded.is_sharded(v) for v in variables]

  def apply_reduced(self, optimizer, grads, variables, global_step):
    """See base class; the sharded tables' slots stay each rank's own."""
    shard_updates.update_in_blocks(optimizer)
    update = super().apply_reduced(optimizer, grads, variables, global_step)
    sharded.keep_slots_local(optimizer, variables)
    return update

  def each_worker(self, value, replicas_per_worker):
    """See base class; rides in the grouped allreduce (a second collective left
    the ranks waiting)."""
    del replicas_per_worker  # one replica per rank
    hvd = self._hvd
    mine = tf.one_hot(hvd.rank(), hvd.size()) * tf.cast(value, tf.float32)
    if hvd.size() == 1:
      return lambda: mine
    rider = {"mine": mine, "total": None}
    self._riders.append(rider)

    def total():
      if rider["total"] is None:
        raise ValueError("each_worker's result is read once the update's "
                         "exchange (all_mean or apply_mean) is built")
      return rider["total"]
    return total

  def all_mean(self, grads, sums):
    """See base class."""
    hvd = self._hvd
    flag = self._stop_flag.flag()
    if hvd.size() == 1:
      # One rank's mean is its own, so nothing is exchanged (nor compressed),
      # as in Horovod's DistributedOptimizer; an allreduce would still wait
      # for the background thread's next cycle every update.
      self._stop_flag.folded(flag)
      return list(grads), list(sums)
    owned = [i for i, mine in enumerate(self._owned)
             if mine and grads[i] is not None]
    present = [i for i, g in enumerate(grads)
               if g is not None and i not in owned]
    dense = [i for i in present if not isinstance(grads[i], tf.IndexedSlices)]
    sparse = [i for i in present if isinstance(grads[i], tf.IndexedSlices)]
    exchanges = [_SparseExchange(grads[i], float(hvd.size()),
                                 self._sparse_exchange) for i in sparse]
    # Wire layout: compressed tensors (dense gradients, then each sparse
    # gradient's dense payload), the stop flag, then the float32 scalars.
    compressed = [gradients.scale(grads[i], 1.0 / hvd.size()) for i in dense]
    payloads = [e.dense_payload() for e in exchanges]
    for payload in payloads:
      if payload is not None:
        compressed.extend(payload)
    wire = [self._compression.compress(t) for t in compressed]
    # The stop flag only asks whether any rank wants to stop (a total > 0),
    # which every float dtype keeps, so it rides in the gradients' dtype:
    # under compression a float32 flag alone would cost a second group.
    # The riders (each_worker's timings) take the same dtype for the same
    # reason; float16 keeps a time to a thousandth of itself.
    flag_dtype = wire[0][0].dtype if wire else flag.dtype
    riders = [r for r in self._riders if r["total"] is None]
    scalars = list(sums) + [e.rows_sent for e in exchanges]
    summed = _grouped_sum(
        hvd, [t for t, _ in wire] + [tf.cast(flag, flag_dtype)] +
        [tf.cast(r["mine"], flag_dtype) for r in riders] + scalars)
    decompressed = [self._compression.decompress(total, context)
                    for total, (_, context) in zip(summed, wire)]
    self._stop_flag.folded(tf.cast(summed[len(wire)], flag.dtype))
    for rider, total in zip(riders, summed[len(wire) + 1:]):
      rider["total"] = tf.cast(total, tf.float32)
    scalar_totals = summed[len(wire) + 1 + len(riders):]
    means = [None] * len(grads)
    for i in owned:  # already this rank's rows of the mean
      means[i] = gradients.merge_duplicates(grads[i])
    for i, total in zip(dense, decompressed):
      means[i] = total
    dense_results = iter(decompressed[len(dense):])
    rows_gathered = scalar_totals[len(sums):]
    for position, (i, exchange, payload) in enumerate(
        zip(sparse, exchanges, payloads)):
      dense_sums = None
      if payload is not None:
        dense_sums = (next(dense_results), next(dense_results))
      gathered = exchange.sparse_payload()
      if gathered is not None:
        gathered = (hvd.allgather(gathered[0]), hvd.allgather(gathered[1]))
      means[i] = exchange.mean(dense_sums, gathered, rows_gathered[position])
    return means, scalar_totals[:len(sums)]

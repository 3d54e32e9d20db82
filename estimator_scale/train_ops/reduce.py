"""Cross-worker reduction: the only train-op code that differs per backend.

Each backend object (`backends/`) names its reducer; the pipeline never
asks which backend runs.

Every reducer offers the same two operations on a replica's mean gradient:
`apply_mean` (average over all replicas, then apply: the plain path) and
`all_mean` + `apply_reduced` (average first so the caller can look at the
global gradient, as AdaScale must, then apply it).

Allreduce compression (`COMPRESSIONS`) casts the dense gradients to a 16-bit
type for the exchange only: each replica's gradients and AdaScale's squared
norms are computed in float32 before it, the norms are summed uncompressed,
and the mean is cast back to float32 before anything reads it. So
AdaScale's sigma^2 and mu^2 are exact up to the rounding of the mean
gradient (float16: a relative 2^-11 per element). Sparse gradients travel
as they are (Horovod allgathers their rows). float16 holds magnitudes up to
65504: a larger gradient arrives as inf, and the update is skipped as any
non-finite one is (AdaScale, float16 loss scaling).
"""
import tensorflow as tf

from estimator_scale.train_ops import gradients

COMPRESSIONS = ("none", "fp16", "bf16")


def check_compression(compression):
  """Raises ValueError unless `compression` is one of COMPRESSIONS."""
  if compression not in COMPRESSIONS:
    raise ValueError(f"allreduce_compression={compression!r} is unknown; "
                     f"valid: {', '.join(COMPRESSIONS)}")


def _pairs(grads, variables):
  return [(gradients.cast(g, v.dtype.base_dtype), v)
          for g, v in zip(grads, variables)
          if g is not None]


class LocalReducer:
  """One replica, or asynchronous workers (parameter servers): nothing to do."""

  def all_mean(self, grads, sums):
    """Averages `grads` and sums the scalars `sums` over all replicas.

    Returns:
      (mean grads, summed scalars), identical on every replica.
    """
    return list(grads), list(sums)

  def apply_reduced(self, optimizer, grads, variables, global_step):
    """Applies gradients that are already the global mean."""
    return optimizer.apply_gradients(_pairs(grads, variables),
                                     global_step=global_step)

  def apply_mean(self, optimizer, grads, variables, global_step):
    """Averages a replica's gradients over all replicas and applies them."""
    grads, _ = self.all_mean(grads, [])
    return self.apply_reduced(optimizer, grads, variables, global_step)


class StrategyReducer(LocalReducer):
  """tf.distribute replicas (mirrored, multi_worker_mirrored).

  v1 `apply_gradients` in a replica context sums the gradients of all
  replicas before applying, so handing it g / N applies the mean. The
  gradients here come from `tf.gradients` of each replica's own mean loss,
  without the 1/N that `compute_gradients` would have put on the loss.
  """

  def _replicas(self):
    return tf.distribute.get_replica_context().num_replicas_in_sync

  def all_mean(self, grads, sums):
    """See base class."""
    context = tf.distribute.get_replica_context()
    n = float(context.num_replicas_in_sync)
    present = [i for i, g in enumerate(grads) if g is not None]
    reduced = context.all_reduce(
        tf.distribute.ReduceOp.SUM,
        [gradients.scale(grads[i], 1.0 / n) for i in present] + list(sums))
    means = [None] * len(grads)
    for i, g in zip(present, reduced):
      means[i] = g
    return means, reduced[len(present):]

  def apply_reduced(self, optimizer, grads, variables, global_step):
    """See base class."""
    n = float(self._replicas())
    return optimizer.apply_gradients(
        _pairs([gradients.scale(g, 1.0 / n) for g in grads],
               variables),
        global_step=global_step)

  def apply_mean(self, optimizer, grads, variables, global_step):
    """See base class."""
    return self.apply_reduced(optimizer, grads, variables, global_step)


STOP_FLAG = "estimator_scale_stop_flag"
STOP_TOTAL = "estimator_scale_stop_total"
"""Graph collections of the stop flag a reducer folded into its allreduce and
of its sum over the ranks; `hooks.SignalStopHook` feeds one, reads the other.
(Tensors, not pairs: a collection must serialise into the MetaGraph.)"""


def _grouped_sum(hvd, tensors):
  """Sums `tensors` over the ranks: one grouped allreduce per dtype.

  A grouped allreduce takes one dtype; everything of that dtype shares one
  negotiation per update. The groups are made in the order their dtypes
  first appear, the same on every rank, as Horovod's op names must be.
  """
  summed = [None] * len(tensors)
  for dtype in dict.fromkeys(t.dtype for t in tensors):
    indices = [i for i, t in enumerate(tensors) if t.dtype == dtype]
    for i, total in zip(indices, hvd.grouped_allreduce(
        [tensors[i] for i in indices], op=hvd.Sum)):
      summed[i] = total
  return summed


class HorovodReducer(LocalReducer):
  """Horovod ranks: one grouped allreduce per update, for everything.

  Each update's dense gradients, AdaScale's scalar sums and the SIGTERM stop
  flag travel in the same grouped allreduce (one per dtype, so a compressed
  exchange makes two), so an update pays one negotiation instead of one per
  kind; each extra one costs Horovod a cycle (HOROVOD_CYCLE_TIME) of waiting.
  The gradients are divided by the rank count before the sum, which keeps a
  float16 exchange as far from overflow as Horovod's own average.

  Sparse gradients stay sparse (Horovod allgathers their rows), so optimizers
  with lazy sparse updates behave as they do on one process.
  """

  def __init__(self, hvd, compression="none"):
    self._hvd = hvd
    self._compression = {"none": hvd.Compression.none,
                         "fp16": hvd.Compression.fp16}[compression]

  def all_mean(self, grads, sums):
    """See base class."""
    hvd = self._hvd
    flag = tf.compat.v1.placeholder_with_default(0.0, [],
                                                 name="stop_requested")
    tf.compat.v1.add_to_collection(STOP_FLAG, flag)
    if hvd.size() == 1:
      # One rank's mean is its own, so nothing is exchanged (nor compressed),
      # as in Horovod's DistributedOptimizer; an allreduce would still wait
      # for the background thread's next cycle every update.
      tf.compat.v1.add_to_collection(STOP_TOTAL, flag)
      return list(grads), list(sums)
    present = [i for i, g in enumerate(grads) if g is not None]
    means = [None] * len(grads)
    dense = [i for i in present if not isinstance(grads[i], tf.IndexedSlices)]
    wire = [self._compression.compress(
        gradients.scale(grads[i], 1.0 / hvd.size())) for i in dense]
    summed = _grouped_sum(hvd, [t for t, _ in wire] + list(sums) + [flag])
    for i, total, (_, context) in zip(dense, summed, wire):
      means[i] = self._compression.decompress(total, context)
    tf.compat.v1.add_to_collection(STOP_TOTAL, summed[-1])
    for i in present:
      if isinstance(grads[i], tf.IndexedSlices):
        means[i] = hvd.allreduce(grads[i], op=hvd.Average)
    return means, summed[len(dense):-1]

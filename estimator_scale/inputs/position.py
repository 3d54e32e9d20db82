"""Where a training input stands, so a resumed job trains each example once.

The position is computed, not saved as iterator state: every update trains
on one global batch, so at a checkpoint the job has consumed `global_step x
global_batch_size` examples, counted from the last change of global batch.
global_step is in every checkpoint; the global batches the job ran with are
in `input_position.json` beside the checkpoints (one entry per change, a few
bytes, written by the chief when a run starts with another global batch or
worker count than the last). tf.data's own iterator checkpointing is not
used: its state holds the shuffle buffer's contents and one iterator per
worker, so it grows with the buffer and cannot be restored on another
number of workers; a computed position is the same for any number.

The order of the examples is a function of (seed, epoch) and the position,
never of a buffer's contents, so the same position gives the same rest of
the epoch:

- epoch e lists the records in a base order (an array's rows in order; a
  file input's files permuted with (seed, e), each file's records in order);
- that list is cut into windows of `shuffle_buffer` records and each window
  is permuted with (seed, e, window index); a restart reads again only the
  consumed part of its window, and skips (reads without parsing) the
  windows before it;
- the epochs follow one another in one stream; update u trains on the
  stream's examples [u x B, (u + 1) x B), and worker w of W on the w-th of
  W equal slices of them. The next update's examples are thus the same
  whatever the number of workers: a restart with fewer or more workers, or
  an elastic change, shares the rest of the epoch over the new workers.

TFRecord inputs with several files, at least as many as workers, keep
file-level sharding instead (a worker reads only its own files): each
worker reads global batch / workers records per update from its own lane
of files, and `file_shards` deals the rest of the epoch over the new
workers at a change of worker count.
"""
import dataclasses
import json
import os

from absl import logging
import tensorflow as tf

from estimator_scale import errors
from estimator_scale.backends import coordinator as coordinator_lib

HISTORY_FILE = "input_position.json"
"""The global batches a job ran with, beside its checkpoints in model_dir."""

_FOREVER = tf.int64.max


@dataclasses.dataclass(frozen=True)
class Position:
  """Where a run starts in its input.

  Attributes:
    step: the global_step of the checkpoint the run starts from.
    examples: examples the job trained on up to that step, over all workers.
  """
  step: int = 0
  examples: int = 0


@dataclasses.dataclass(frozen=True)
class Span:
  """A stretch of updates that trains a finite input once (a day).

  Its position is (checkpoint step - `start_step`) x global batch, so a
  span needs no history of its own; its global batch stays the same from
  its start to its end.

  Attributes:
    start_step: the global_step its first update starts from.
    records: the records of its input (one epoch of `stream`).
    examples: how many of them it trains, in `stream`'s order: all of them,
      or fewer where the last update's would not split evenly over the
      job's replicas and micro-batches.
  """
  start_step: int
  records: int
  examples: int


def span_done(model_dir, span, global_batch_size):
  """Examples of `span` trained at model_dir's checkpoint."""
  step = coordinator_lib.checkpoint_step(model_dir) if model_dir else 0
  done = max(step - span.start_step, 0) * global_batch_size
  return min(done, span.examples)


def read_history(model_dir):
  """The entries of model_dir's `input_position.json` ([] if none)."""
  path = os.path.join(model_dir, HISTORY_FILE)
  if not tf.io.gfile.exists(path):
    return []
  with tf.io.gfile.GFile(path) as f:
    try:
      return json.load(f)
    except ValueError as e:
      raise errors.DataError(
          f"{path} is not the JSON the framework writes ({e}); delete it to "
          "start the input of this epoch over") from e


def _write_history(model_dir, entries):
  """Replaces the history at once, so a reader never sees half of it."""
  path = os.path.join(model_dir, HISTORY_FILE)
  tf.io.gfile.makedirs(model_dir)
  with tf.io.gfile.GFile(path + ".tmp", "w") as f:
    json.dump(entries, f)
  tf.io.gfile.rename(path + ".tmp", path, overwrite=True)


def position_at(entries, step, global_batch_size):
  """The Position of a run at `step` with this global batch.

  Args:
    entries: the history (`read_history`), oldest first; entries after
      `step` (from updates a restart rolled back) do not count.
    step: the global_step the run starts from.
    global_batch_size: examples per update in this run.

  Returns:
    A `Position`.
  """
  entries = [e for e in entries if e["step"] <= step]
  if not entries:
    # A job from before the history, or its first run: one batch so far.
    examples = step * global_batch_size
    return Position(step, examples)
  last = entries[-1]
  examples = last["examples"] + (step - last["step"]) * last["global_batch"]
  return Position(step, examples)


def resume(model_dir, global_batch_size, workers, is_chief):
  """The Position of the run about to start from model_dir's checkpoint.

  The chief adds an entry to the history when this run's global batch or
  worker count differs from the last one's; the others only read, and
  compute the same Position whether or not they see that entry.

  Args:
    model_dir: the job's checkpoint directory, or None (no checkpoint).
    global_batch_size: examples per update in this run.
    workers: input shards in this run.
    is_chief: whether this process writes the history.

  Returns:
    A `Position`.
  """
  if not model_dir:
    return Position()
  step = coordinator_lib.checkpoint_step(model_dir)
  entries = [e for e in read_history(model_dir) if e["step"] <= step]
  position = position_at(entries, step, global_batch_size)
  now = {"step": step, "examples": position.examples,
         "global_batch": global_batch_size, "workers": workers}
  last = entries[-1] if entries else None
  if is_chief and (last is None or (last["global_batch"], last["workers"]) !=
                   (global_batch_size, workers)):
    _write_history(model_dir, entries + [now])
  if position.examples:
    logging.info("input: resuming at example %d of the job (step %d)",
                 position.examples, step)
  return position


def _shuffled_windows(records, seed, epoch, window, first_window):
  """`records` from window `first_window` on, each window permuted."""
  records = records.skip(first_window * window).batch(window)
  epoch_seed = tf.stack([tf.constant(seed, tf.int64), epoch])

  def permute(index, block):
    key = tf.random.experimental.stateless_fold_in(epoch_seed, index)
    order = tf.random.experimental.stateless_shuffle(
        tf.range(tf.shape(block, out_type=tf.int64)[0]), seed=key)
    return tf.gather(block, order)

  return records.enumerate(first_window).map(permute).unbatch()


def stream(epoch_records, count_records, position, seed, window):
  """Every epoch's records, one after another, from `position` on.

  Args:
    epoch_records: epoch (an int64 scalar tensor) -> a Dataset of the
      epoch's records in their base order (the same count every epoch).
    count_records: () -> records per epoch, a Python int or an int64 scalar
      tensor; called only when `position` > 0.
    position: records of the stream already consumed.
    seed: the shuffle seed, or None for the base order.
    window: records per shuffled window (None: one epoch's count).

  Returns:
    A Dataset of records that never ends.
  """
  if position:
    count = tf.cast(count_records(), tf.int64)
    first_epoch, offset = position // count, position % count
  else:
    count = first_epoch = offset = tf.constant(0, tf.int64)
  if seed is None:
    epochs = tf.data.Dataset.range(first_epoch, _FOREVER)
    return epochs.flat_map(epoch_records).skip(offset)
  if window is None:
    window = count if position else count_records()
  window = tf.cast(window, tf.int64)
  first_window = offset // window

  def shuffled(epoch):
    start = tf.where(tf.equal(epoch, first_epoch), first_window,
                     tf.zeros_like(first_window))
    return _shuffled_windows(epoch_records(epoch), seed, epoch, window, start)

  epochs = tf.data.Dataset.range(first_epoch, _FOREVER)
  return epochs.flat_map(shuffled).skip(offset - first_window * window)


def file_records(files, read, seed, cycle_length=1):
  """epoch -> the records of `files` in epoch order, for `stream`.

  The files are permuted with (seed, epoch) (kept in order when seed is
  None) and read `cycle_length` at a time, interleaved in a fixed order.

  Args:
    files: the paths.
    read: a path (string tensor) -> a Dataset of its records.
    seed: the shuffle seed, or None.
    cycle_length: files read at once.
  """
  names = tf.constant(list(files))

  def epoch_records(epoch):
    ordered = names
    if seed is not None:
      key = tf.random.experimental.stateless_fold_in(
          tf.stack([tf.constant(seed, tf.int64), epoch]), -1)
      ordered = tf.gather(names, tf.random.experimental.stateless_shuffle(
          tf.range(len(files)), seed=key))
    return tf.data.Dataset.from_tensor_slices(ordered).interleave(
        read, cycle_length=min(cycle_length, len(files)),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

  return epoch_records


def count(records):
  """The number of elements of a finite Dataset, as an int64 tensor."""
  return records.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1)


def worker_share(records, global_batch_size, shards, index):
  """This worker's slice of every global batch of `records`."""
  if shards == 1:
    return records
  share = global_batch_size // shards
  return records.batch(global_batch_size, drop_remainder=True).map(
      lambda batch: batch[index * share:(index + 1) * share]).unbatch()

"""Where a training input stands, so a resumed job trains each example once."""
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
  """Where a run starts: the checkpoint's `step`, `examples` trained to it."""
  step: int = 0
  examples: int = 0


@dataclasses.dataclass(frozen=True)
class Span:
  """Updates training a finite input (a day) once, from `start_step`."""
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
  """The Position at `step`; `entries` after it (rolled back) do not count."""
  entries = [e for e in entries if e["step"] <= step]
  if not entries:
    # A job from before the history, or its first run: one batch so far.
    examples = step * global_batch_size
    return Position(step, examples)
  last = entries[-1]
  examples = last["examples"] + (step - last["step"]) * last["global_batch"]
  return Position(step, examples)


def resume(model_dir, global_batch_size, workers, is_chief):
  """The Position of the run about to start from model_dir's checkpoint; only
  the chief records a change of batch or worker count."""
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
  """Every epoch's records, one after another, from `position` on, forever.

  Args:
    epoch_records: epoch (int64 tensor) -> Dataset of its records in base
      order (the same count every epoch).
    count_records: () -> records per epoch; called only when `position` > 0.
    position: records of the stream already consumed.
    seed: the shuffle seed, or None for the base order.
    window: records per shuffled window (None: one epoch's count).
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
  """epoch -> `files`' records, permuted with (seed, epoch), for `stream`."""
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

"""Checkpoints of partitioned tables that a ps task can write within its share.

While a save reads a resource variable (sharing its buffer), a sparse
update from an asynchronous worker copies the whole variable, and
TensorFlow's saver reads all of a device's variables in one op: a ps task
can hold its variables twice. This saver writes each device's variables
in groups of at most `group_bytes`, one after the other, so an update
copies at most a group; the checkpoint is the same.
"""
import collections

import tensorflow as tf
from tensorflow.python.training import saver as tf_saver

BLOCK_BYTES = 16 << 20
"""Bytes of rows a block read or written at once holds at most: a rank's
save of its shard, an export's copy of a table."""


def _bytes(saveable):
  """The bytes of the variable (or part) a saveable saves; 0 if unknown."""
  shape = tf.TensorShape(getattr(saveable.op, "shape", None))
  if not shape.is_fully_defined():
    return 0
  return shape.num_elements() * saveable.specs[0].dtype.size


def groups(saveables_by_device, group_bytes):
  """[(device, [saveable])]: each device's saveables in order, in groups of
  at most `group_bytes` (a larger saveable is a group alone)."""
  grouped = []
  for device, saveables in saveables_by_device:
    current, size = [], 0
    for saveable in saveables:
      bytes_ = _bytes(saveable)
      if current and size + bytes_ > group_bytes:
        grouped.append((device, current))
        current, size = [], 0
      current.append(saveable)
      size += bytes_
    if current:
      grouped.append((device, current))
  return grouped


class _GroupedSaverBuilder(tf_saver.BulkSaverBuilder):
  """Saves each device's variables a group at a time (see module doc)."""

  def __init__(self, group_bytes):
    super().__init__()
    self._group_bytes = group_bytes
    self._last_save = collections.defaultdict(list)

  def _GroupByDevices(self, saveables):  # pylint: disable=invalid-name
    return groups(super()._GroupByDevices(saveables), self._group_bytes)

  def _AddShardedSaveOpsForV2(self, checkpoint_prefix, per_device):  # pylint: disable=invalid-name
    self._last_save.clear()
    return super()._AddShardedSaveOpsForV2(checkpoint_prefix, per_device)

  def _AddSaveOps(self, filename_tensor, saveables):  # pylint: disable=invalid-name
    # The reads of a group's variables are made here, so they wait for the
    # device's previous group to be written.
    device = saveables[0].device
    with tf.control_dependencies(self._last_save[device]):
      saved = super()._AddSaveOps(filename_tensor, saveables)
    self._last_save[device] = [saved]
    return saved


def write_in_groups(saver, group_bytes):
  """Gives `saver` this module's builder, unless built or given its own."""
  # tf.compat.v1.train.Saver keeps its builder argument as `_builder` and
  # uses it when it builds (deferred builds happen at the session's start).
  if saver.saver_def is None and saver._builder is None:  # pylint: disable=protected-access
    saver._builder = _GroupedSaverBuilder(group_bytes)  # pylint: disable=protected-access


def grouped_saver(group_bytes, config):
  """A sharded Saver like Estimator's default (keeping as `config` says),
  reading at most `group_bytes` of a device's variables at once."""
  return tf.compat.v1.train.Saver(
      sharded=True, max_to_keep=config.keep_checkpoint_max,
      keep_checkpoint_every_n_hours=config.keep_checkpoint_every_n_hours,
      defer_build=True, save_relative_paths=True,
      builder=_GroupedSaverBuilder(group_bytes))


def publish(source, prefix):
  """Renames checkpoint `source` to `prefix`, index last: the index names a
  checkpoint whole, so no reader finds a partial one at `prefix`."""
  for path in tf.io.gfile.glob(source + ".data-*"):
    tf.io.gfile.rename(path, prefix + path[len(source):], overwrite=True)
  tf.io.gfile.rename(source + ".index", prefix + ".index", overwrite=True)

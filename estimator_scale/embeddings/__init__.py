"""Large tables: split over parameter servers, and refused where they
cannot fit (`place_variables` wraps any Estimator model_fn)."""
import contextlib
import os

import tensorflow as tf

from estimator_scale import environment
from estimator_scale.embeddings import capacity
from estimator_scale.embeddings import compact
from estimator_scale.embeddings import deltas
from estimator_scale.embeddings import partitioning
from estimator_scale.embeddings import ps_reading
from estimator_scale.embeddings import saving
from estimator_scale.embeddings import shard_checkpoints
from estimator_scale.embeddings import sharded

CompactExport = compact.CompactExport
reading_on_ps = ps_reading.reading_on_ps
predictions_on_ps = ps_reading.predictions_on_ps


@contextlib.contextmanager
def exporting(checkpoint, compact_export=None):
  """Within it, graphs are exports of `checkpoint`: sliced tables are copied,
  not restored; dynamic tables are kept as `compact_export` says."""
  sources = ([] if checkpoint is None else
             [checkpoint, shard_checkpoints.merged_checkpoint(checkpoint)])
  with shard_checkpoints.exporting(), compact.compacting(compact_export,
                                                         sources):
    yield


def min_slice_bytes(environ=None):
  """The variable's bytes, or the default; ConfigError when not > 0."""
  return capacity.bytes_setting(os.environ if environ is None else environ,
                                environment.MIN_SLICE,
                                partitioning.MIN_SLICE_BYTES)


def max_part_bytes(environ=None):
  """The variable's bytes, or the default; ConfigError when not > 0."""
  return capacity.bytes_setting(os.environ if environ is None else environ,
                                environment.MAX_PART,
                                partitioning.MAX_PART_BYTES)


def _save_in_groups(spec, part_bytes, config):
  """Makes training save a ps task's parts a group at a time (`saving`), via
  the scaffold's unbuilt Saver, else a default-like Saver if none chosen."""
  saver = spec.scaffold.saver
  if saver is not None:
    saving.write_in_groups(saver, part_bytes)
  elif not tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SAVERS):
    tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.SAVERS,
                                   saving.grouped_saver(part_bytes, config))


def _saving_deltas(spec, config, full_every):
  """`spec` whose Saver writes deltas between full saves (`deltas`), where
  tables are tracked: one process's, or a synchronous ps chief's parts."""
  from estimator_scale.embeddings import dynamic  # pylint: disable=g-import-not-at-top
  tracked = [(t, t.changes) for t in dynamic.tables()
             if t.changes and t.shard is None] + [
                 (t, t.changes) for t in deltas.static_tables()
                 if not sharded.is_sharded(t.pool)]
  if not tracked:
    return spec
  grouped = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SAVERS)
  saver = spec.scaffold.saver or (grouped[0] if grouped else None)
  saver = saver or tf.compat.v1.train.Saver(
      sharded=True, max_to_keep=config.keep_checkpoint_max,
      keep_checkpoint_every_n_hours=config.keep_checkpoint_every_n_hours,
      defer_build=True, save_relative_paths=True)
  saver = deltas.DeltaSaver(saver, tracked, full_every)
  return spec._replace(
      scaffold=tf.compat.v1.train.Scaffold(saver=saver,
                                           copy_from_scaffold=spec.scaffold),
      training_chief_hooks=list(spec.training_chief_hooks) + [
          deltas.FullSaveAtEnd(saver, config.model_dir)])


def place_variables(model_fn, num_ps, topology, full_checkpoint_every=1):
  """`model_fn` with its variables placed as the job's backend needs.

  Args:
    model_fn: model_fn(features, labels, mode, config).
    num_ps: the job's ps tasks; 0 or 1 leaves every variable whole.
    topology: this process's Topology (the chief logs the capacity line).
    full_checkpoint_every: saves per full checkpoint, the others deltas.

  Returns:
    model_fn(features, labels, mode, params, config); `params` is only for
    the Estimator to show, `model_fn` has its own bound.
  """
  slice_bytes, part_bytes = min_slice_bytes(), max_part_bytes()
  # Evaluation and export hold Horovod-sharded tables whole.
  model_fn = shard_checkpoints.whole_tables_outside_training(model_fn)

  def placed(features, labels, mode, params, config):
    del params  # bound in model_fn
    # Deltas saved by an earlier run are applied, whatever this one's
    # setting (with 1, each save of this run is full).
    with_deltas = mode == "train" and (
        full_checkpoint_every > 1 or deltas.follow_latest(config.model_dir))
    with contextlib.ExitStack() as stack:
      if with_deltas:
        stack.enter_context(deltas.tracking(full_checkpoint_every))
      if num_ps > 1:
        stack.enter_context(partitioning.partitioned_variables(
            num_ps, slice_bytes, part_bytes))
      if topology.backend.tables_on_ps and mode == "train":
        # Not at the top: dynamic tables import the backends, which import
        # this package.
        from estimator_scale.embeddings import dynamic_ps  # pylint: disable=g-import-not-at-top
        from estimator_scale.embeddings import dynamic_ps_moves  # pylint: disable=g-import-not-at-top
        with dynamic_ps.placement(num_ps, topology):
          spec = model_fn(features, labels, mode, config)
        if topology.is_chief and dynamic_ps.tables():
          spec = spec._replace(training_hooks=list(spec.training_hooks) + [
              dynamic_ps_moves.MoveHook(dynamic_ps.tables(), num_ps)])
      elif mode == "train":
        spec = model_fn(features, labels, mode, config)
      else:
        with ps_reading.placed_on_ps():
          if ps_reading.active():  # dynamic tables split as training did
            from estimator_scale.embeddings import dynamic_ps  # pylint: disable=g-import-not-at-top
            stack.enter_context(dynamic_ps.reading_placement(num_ps))
          spec = model_fn(features, labels, mode, config)
    if mode == "train":  # the line only where tables are split
      spec = spec._replace(training_hooks=list(spec.training_hooks) + [
          capacity.CheckHook(topology.backend.name,
                             topology.is_chief and num_ps > 1,
                             sharded.COLLECTION)])
      if num_ps > 1:
        _save_in_groups(spec, part_bytes, config)
      if with_deltas:
        spec = _saving_deltas(spec, config, full_checkpoint_every)
    return spec
  return placed

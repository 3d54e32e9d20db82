"""Checkpoints of sharded tables: every rank saves its slice, rank 0 merges.

Only rank 0 writes Estimator's checkpoints and it holds only its own rows,
so each rank saves its shard and slots as slices of the whole variables,
a block of rows per part (a Saver's whole read would copy a gathered
variable), to `sharded_tables/ckpt-<step>-of<N>-rank<r>-part<k>`; rank 0
merges them into `sharded_tables/ckpt-<step>`, whence any number of ranks
restore. Invariants: the merge is renamed into place index last; only this
save's parts (N in their names) are merged, as leftovers would overlap;
rank 0's checkpoint (an elastic commit) follows the merge; the model_dir
is shared (checked by a token); ranks save every `save_checkpoints_steps`
and at the end, so a restart from a time-based checkpoint is refused.
"""
import contextlib
import contextvars
import os
import random
import re
import time

from absl import logging
import numpy as np
import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.ops import variables as tf_variables  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.training.saving import saveable_object_util  # pylint: disable=g-direct-tensorflow-import

from estimator_scale import errors
from estimator_scale import moments
from estimator_scale import resume
from estimator_scale.embeddings import compact
from estimator_scale.embeddings import deltas
from estimator_scale.embeddings import dynamic
from estimator_scale.embeddings import dynamic_reshard
from estimator_scale.embeddings import saving
from estimator_scale.embeddings import shard_deltas
from estimator_scale.embeddings import sharded

DIRECTORY = "sharded_tables"
"""Where in the model_dir the sharded tables' checkpoints go."""
MERGING = "merging"
"""Where in DIRECTORY rank 0 merges a save before it renames it into
place (`publish`)."""

_TOKEN = "shared-dir-token"

_EXPORTING = contextvars.ContextVar("estimator_scale_exporting",
                                    default=False)

def _sliced_variables():
  """This rank's shards and their slots: local variables with slice info."""
  return [v for v in tf.compat.v1.local_variables()
          if getattr(v, "_save_slice_info", None) is not None]


def _row_blocks(name, full_shape, offset, shape, dtype):
  """(slice spec, first row, rows) of each block of at most
  saving.BLOCK_BYTES of the rows `shape` at `offset` of tensor `name`."""
  rows, *rest = shape
  block = max(1, saving.BLOCK_BYTES // (dtype.size * max(1, int(np.prod(rest)))))
  for first in range(0, rows, block):
    count = min(block, rows - first)
    yield tf_variables.Variable.SaveSliceInfo(
        name, full_shape, [offset[0] + first] + list(offset[1:]),
        [count] + list(rest)).spec, first, count


def _blocks(variables):
  """(variable, checkpoint name, block slice spec, block row ids) for each
  block of at most saving.BLOCK_BYTES of each variable's rows."""
  for variable in variables:
    info = variable._save_slice_info  # pylint: disable=protected-access
    for spec, first, count in _row_blocks(
        info.full_name, info.full_shape, info.var_offset, info.var_shape,
        variable.dtype):
      yield variable, info.full_name, spec, tf.range(first, first + count)


def _save_in_blocks(variables, prefix, extra=None):
  """(op saving `variables` a block of rows per part `prefix`-part<k>, the
  number of parts); part 0 also holds `extra` ({name: tensor}) whole."""
  done = tf.no_op()
  parts = 0
  extra = dict(extra or {})
  for variable, name, spec, ids in _blocks(variables):
    with tf.control_dependencies([done]):
      done = tf.raw_ops.SaveV2(
          prefix=tf.strings.join([prefix, f"-part{parts}"]),
          tensor_names=[name] + list(extra),
          shape_and_slices=[spec] + [""] * len(extra),
          tensors=[tf.gather(variable, ids)] + list(extra.values()))
    parts, extra = parts + 1, {}
  return done, parts


def _restore_in_blocks(variables, prefix):
  """Op restoring `variables` from `prefix` a block of rows at a time (a
  whole read would hold every variable twice at once)."""
  done = tf.no_op()
  for variable, name, spec, ids in _blocks(variables):
    with tf.control_dependencies([done]):
      (values,) = tf.raw_ops.RestoreV2(
          prefix=prefix, tensor_names=[name], shape_and_slices=[spec],
          dtypes=[variable.dtype.base_dtype])
      done = resource_variable_ops.resource_scatter_update(
          variable.handle, ids, values)
  return done


def check_shared(directory, hvd, token, read_token):
  """Raises unless this rank reads rank 0's `token` from `directory`.

  Args:
    directory: the sharded tables' directory.
    hvd: horovod.tensorflow.
    token: rank 0's token (broadcast to every rank).
    read_token: reads the token file; None when missing.

  Raises:
    errors.ConfigError: the directory is not the one rank 0 wrote to.
  """
  if hvd.rank() == 0 or read_token() == token:
    return
  raise errors.ConfigError(
      f"sharded tables need a --model_dir every Horovod rank shares; rank "
      f"{hvd.rank()} does not see in {directory} what rank 0 wrote there (a "
      "directory on each host's own disk?): give a shared file system or a "
      "gs://, s3:// or hdfs:// path")


_SAVED_STEP = re.compile(r"ckpt-(\d+)[.-]")
"""The step of a file of the tables' checkpoints (merged, or a rank's
part)."""


def drop_unkept(directory, model_dir, before):
  """Removes tables' checkpoints before `before` whose Estimator checkpoint
  is gone (else they fill the disk), keeping fulls that deltas need."""
  kept = {int(name[:-len(".index")].rpartition("-")[2])
          for name in tf.io.gfile.glob(os.path.join(model_dir,
                                                    "model.ckpt-*.index"))}
  kept |= shard_deltas.needed_fulls(directory, kept)
  steps = {}
  for name in tf.io.gfile.glob(os.path.join(directory, "ckpt-*")):
    found = _SAVED_STEP.match(os.path.basename(name))
    if found and int(found.group(1)) < before:
      steps.setdefault(int(found.group(1)), []).append(name)
  for step, names in steps.items():
    if step not in kept:
      for name in names:
        tf.io.gfile.remove(name)
      shard_deltas.drop_chain(directory, step)




def _step(checkpoint):
  return int(tf.train.load_checkpoint(checkpoint).get_tensor(
      tf.compat.v1.GraphKeys.GLOBAL_STEP))


def merged_checkpoint(checkpoint):
  """The merged tables' checkpoint for Estimator's `checkpoint`'s step."""
  return os.path.join(os.path.dirname(checkpoint), DIRECTORY,
                      f"ckpt-{_step(checkpoint)}")


def tables_of(checkpoint):
  """(merged checkpoint, deltas after it) holding the ranks' tables at
  `checkpoint`'s step, or None."""
  merged = merged_checkpoint(checkpoint)
  if tf.io.gfile.exists(merged + ".index"):
    return merged, []
  return shard_deltas.chain_to(os.path.dirname(merged), _step(checkpoint))


def _holds(checkpoint, keys):
  """Whether `checkpoint` holds every tensor named in `keys`."""
  reader = tf.train.load_checkpoint(checkpoint)
  return all(reader.has_tensor(key) for key in keys)


def _holds_tables(checkpoint):
  """Whether `checkpoint` holds the sharded tables whole (one process saved
  it): every table of a merged checkpoint beside it."""
  merged = [path[:-len(".index")] for path in tf.io.gfile.glob(
      os.path.join(os.path.dirname(checkpoint), DIRECTORY, "ckpt-*.index"))
            if "-of" not in os.path.basename(path)]
  if not merged:
    return False
  keys = tf.train.load_checkpoint(merged[0]).get_variable_to_shape_map()
  return _holds(checkpoint, set(keys) - {dynamic_reshard.RANKS})


def _has_tables(checkpoint):
  """Whether the ranks can restore `checkpoint`'s step: tables merged, saved
  whole in it, or step 0 (the initializers draw it)."""
  return (_step(checkpoint) == 0 or tables_of(checkpoint) is not None or
          _holds_tables(checkpoint))


def resume_where_tables_were_merged(model_dir):
  """Points `model_dir`'s latest checkpoint back to the newest with tables.

  Rank 0's checkpoint precedes the ranks' save (Estimator's saver is the
  first hook), so a rank lost in between leaves one without tables.
  Returns the checkpoint left behind, or None.
  """
  state = tf.train.get_checkpoint_state(model_dir)
  if state is None or not tf.io.gfile.exists(
      os.path.join(model_dir, DIRECTORY, _TOKEN)):
    return None
  latest = state.model_checkpoint_path
  if _has_tables(latest):
    return None
  kept = [path for path in state.all_model_checkpoint_paths
          if _has_tables(path)]
  if not kept:
    return None
  tf.compat.v1.train.update_checkpoint_state(
      model_dir, kept[-1], all_model_checkpoint_paths=kept)
  logging.warning("%s has no merged sharded tables (a save the ranks did "
                  "not finish); resuming from %s", latest, kept[-1])
  return latest


@contextlib.contextmanager
def exporting():
  """Within it, graphs built are exports: tables merged from the ranks'
  slices are copied into the SavedModel, not restored."""
  token = _EXPORTING.set(True)
  try:
    yield
  finally:
    _EXPORTING.reset(token)


def _copy_in_blocks(source, keys, destination):
  """Copies tensors `keys` of `source` to `destination`-part<k>, a block of
  at most saving.BLOCK_BYTES each, in its own graph; returns the prefixes."""
  reader = tf.train.load_checkpoint(source)
  shapes, dtypes = (reader.get_variable_to_shape_map(),
                    reader.get_variable_to_dtype_map())
  parts = []
  with tf.Graph().as_default(), tf.compat.v1.Session() as session:
    prefix = tf.compat.v1.placeholder(tf.string, [])
    spec = tf.compat.v1.placeholder(tf.string, [])
    for key in keys:  # two ops a tensor, fed each block
      (values,) = tf.raw_ops.RestoreV2(
          prefix=source, tensor_names=[key], shape_and_slices=[spec],
          dtypes=[dtypes[key]])
      copy = tf.raw_ops.SaveV2(prefix=prefix, tensor_names=[key],
                               shape_and_slices=[spec], tensors=[values])
      shape = shapes[key]
      for block, _, _ in _row_blocks(key, shape, [0] * len(shape), shape,
                                     dtypes[key]):
        parts.append(f"{destination}-part{len(parts)}")
        session.run(copy, {prefix: parts[-1], spec: block})
  return parts


class WholeTablesSaver(tf.compat.v1.train.Saver):
  """Estimator's Saver, reading whole tables from the merged checkpoint.

  It saves every variable. In an export (`exporting`), sliced tables are
  copied at save a block at a time, never held whole; compact tables are
  written at save, after the size check.

  Args:
    keys: the tables' names in a checkpoint.
    split: whether they are split over ps, in Estimator's checkpoint.
    served: the compact export's tables.
  """

  def __init__(self, keys, split=False, served=()):
    super().__init__(sharded=True, save_relative_paths=True)
    saveables = saveable_object_util.op_list_to_dict(
        tf.compat.v1.global_variables() + tf.compat.v1.get_collection(
            tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS))
    self._table_keys = sorted(set(keys))
    self._served = list(served)
    others = set(self._table_keys) | compact.keys(self._served)
    self._rest = tf.compat.v1.train.Saver(
        var_list={k: v for k, v in saveables.items() if k not in others},
        sharded=True, name="whole_tables_rest")
    self._tables = tf.compat.v1.train.Saver(
        var_list={k: v for k, v in saveables.items()
                  if k in self._table_keys},
        name="whole_tables_restore") if self._table_keys else None
    self._copy = _EXPORTING.get()
    self._split = split
    self._tables_from = None
    self._bytes = compact.variable_bytes(tf.compat.v1.global_variables())
    self._checkpoint = None

  def _source(self, save_path):
    """The checkpoint that holds the tables of `save_path`."""
    if _holds(save_path, self._table_keys):
      return save_path
    found = tables_of(save_path)
    if found is None:
      raise errors.ConfigError(
          f"checkpoint {save_path} holds the sharded tables "
          f"{', '.join(self._table_keys)} in {merged_checkpoint(save_path)}, "
          "which is missing; evaluate a checkpoint every rank saved "
          "(save_checkpoints_steps, or the one training ended with)")
    _refuse_deltas(save_path, found, "predict or export")
    return found[0]

  def restore(self, sess, save_path):
    """See base class; tables come from the merged checkpoint if needed."""
    self._checkpoint = save_path
    source = self._source(save_path)
    copy = self._copy and (source != save_path or self._split)
    if source == save_path and not copy and not self._served:
      return super().restore(sess, save_path)
    self._rest.restore(sess, save_path)
    if copy:
      self._tables_from = source
    elif self._tables is not None:
      self._tables.restore(sess, source)
    return None

  def save(self, sess, save_path, *args, **kwargs):
    """See base class; unrestored tables are copied in from where they are."""
    if self._copy:
      compact.check_size(self._bytes, self._checkpoint, self._served)
    if self._tables_from is None and not self._served:
      return super().save(sess, save_path, *args, **kwargs)
    parts = [self._rest.save(sess, save_path + "-rest",
                             write_meta_graph=False, write_state=False)]
    if self._tables_from is not None:
      parts += _copy_in_blocks(self._tables_from, self._table_keys,
                               save_path + "-tables")
    parts += compact.write(self._served, save_path + "-served")
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
      session.run(tf.raw_ops.MergeV2Checkpoints(
          checkpoint_prefixes=parts, destination_prefix=save_path,
          delete_old_dirs=False))
    return save_path


def _refuse_deltas(checkpoint, found, what):
  """Raises where `found` (`tables_of`) has deltas: only ranks apply them."""
  if found[1]:
    raise errors.ConfigError(
        f"checkpoint {checkpoint} holds its sharded tables as {found[0]} and "
        f"{len(found[1])} delta(s) after it, which only Horovod ranks "
        f"apply; {what} a checkpoint with a full save of the tables (the "
        "one training ended with, or one in full_checkpoint_every)")


def split_over_ranks(checkpoint):
  """Whether `checkpoint`'s tables were saved by Horovod ranks, so no single
  process can evaluate them."""
  return tables_of(checkpoint) is not None


class RankTablesSaver(tf.compat.v1.train.Saver):
  """The Saver of an evaluation graph on Horovod ranks: other variables, then
  this rank's rows from the merged tables a block at a time (a whole slice
  read holds the shard twice), re-sharding if needed.

  Args:
    shards: this rank's shards (`sharded.read_on_ranks`).
    hvd: horovod.tensorflow, initialised.
  """

  def __init__(self, shards, hvd):
    own = {v.ref() for v in shards}
    super().__init__(
        var_list=[v for v in tf.compat.v1.global_variables()
                  if v.ref() not in own] + tf.compat.v1.get_collection(
                      tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS),
        sharded=True, save_relative_paths=True)
    # Before the local_init_op: the shards, and what a re-shard counts.
    self._initialise = tf.compat.v1.variables_initializer(shards + [
        t.evicted for t in dynamic.tables() if t.shard is not None])
    self._tables = _RankTables(hvd, shards)

  def restore(self, sess, save_path):
    """See base class."""
    super().restore(sess, save_path)
    sess.run(self._initialise)
    self._tables.restore(sess, tables_of(save_path))


class _RankTables:
  """This rank's (`hvd`) ops reading its `sliced` rows from a merged
  checkpoint and deltas, then re-sharding."""

  def __init__(self, hvd, sliced):
    self._hvd = hvd
    self.source = tf.compat.v1.placeholder(tf.string, [])
    self.rows = _restore_in_blocks(sliced, self.source)
    self.deltas = shard_deltas.RankDeltas(hvd, sliced)
    self.whole_rows = _restore_in_blocks(self.deltas.whole, self.source)
    self.resharder = dynamic_reshard.Resharder(hvd, sliced)

  def restore(self, session, found):
    """Reads `found` ((checkpoint, deltas), `tables_of`)."""
    merged, chain = found
    session.run(self.rows, {self.source: merged})
    for delta in chain:
      session.run(self.whole_rows, {self.source: delta})
      self.deltas.apply_rows_of(session, delta)
    self.resharder.after_restore(session, merged)
    session.run(self.deltas.reset)
    if self._hvd.rank() == 0:
      logging.info("Sharded tables restored from %s%s on %d ranks", merged,
                   f" and {len(chain)} delta(s) after it, to step "
                   f"{deltas.step_of(chain[-1])}" if chain else "",
                   self._hvd.size())


def _rank_tables(spec):
  """`spec` restored by a `RankTablesSaver` (unless it has its own Saver)."""
  shards = [v for v in tf.compat.v1.global_variables()
            if getattr(v, "_save_slice_info", None) is not None]
  if not shards or spec.scaffold.saver is not None:
    return spec
  return spec._replace(scaffold=tf.compat.v1.train.Scaffold(
      saver=RankTablesSaver(shards, sharded.horovod()),
      copy_from_scaffold=spec.scaffold))


def _joined(checkpoint, merged, model_dir):
  """Joins copies of `checkpoint` and `merged` (the merge deletes its inputs;
  the ranks' files must stay) into the model_dir's latest; returns it."""
  joined = os.path.join(model_dir, f"whole-tables-ckpt-{_step(checkpoint)}")
  copies = []
  for source, suffix in ((checkpoint, "-rest"), (merged, "-tables")):
    for path in tf.io.gfile.glob(source + ".index") + tf.io.gfile.glob(
        source + ".data-*"):
      tf.io.gfile.copy(path, joined + suffix + path[len(source):],
                       overwrite=True)
    copies.append(joined + suffix)
  with tf.Graph().as_default(), tf.compat.v1.Session() as session:
    session.run(tf.raw_ops.MergeV2Checkpoints(
        checkpoint_prefixes=copies, destination_prefix=joined,
        delete_old_dirs=False))
  # Paths as the state gives them (under model_dir): TensorFlow rewrites
  # them relative to a model_dir that is relative or an object store's.
  state = tf.train.get_checkpoint_state(model_dir)
  tf.compat.v1.train.update_checkpoint_state(
      model_dir, joined,
      all_model_checkpoint_paths=list(state.all_model_checkpoint_paths) + [
          joined])
  logging.info("Joined %s and its tables %s into %s for one process",
               checkpoint, merged, joined)
  return joined


def _resume_tables_whole(spec, config):
  """`spec` of one process resuming the ranks' checkpoint: tables joined in
  (`_joined`), sketches restarted; ConfigError for several workers."""
  tables = tf.compat.v1.get_collection(sharded.WHOLE_COLLECTION)
  if not tables or not config.model_dir:
    return spec
  if config.num_worker_replicas == 1:
    # As the ranks would: rank 0's checkpoint of a save they did not
    # finish has no tables to join.
    resume_where_tables_were_merged(config.model_dir)
  latest = tf.train.latest_checkpoint(config.model_dir)
  if latest is None:
    return spec
  if not _holds(latest, saveable_object_util.op_list_to_dict(tables)):
    found = tables_of(latest)
    if found is None:
      return spec  # the Saver names what the checkpoint lacks
    _refuse_deltas(latest, found, "resume on one process")
    merged = found[0]
    if config.num_worker_replicas > 1:
      raise errors.ConfigError(
          f"checkpoint {latest} in {config.model_dir} holds its tables in "
          f"{merged}, saved by Horovod ranks; resume it on one process or on "
          f"Horovod ranks, not on {config.num_worker_replicas} workers")
    latest = _joined(latest, merged, config.model_dir)
  saved = dynamic_reshard.ranks_saved(latest)
  if saved == 1:
    return spec
  return spec._replace(scaffold=dynamic_reshard.restarting_sketches(
      spec.scaffold, saved))


def _keeping_restored_files(spec, config):
  """`spec` whose Saver doesn't rewrite the restored checkpoint without the
  tables before the ranks read theirs from it."""
  if (spec.scaffold.saver is not None or not config.model_dir or
      not _sliced_variables()):
    return spec
  return spec._replace(scaffold=tf.compat.v1.train.Scaffold(
      saver=resume.training_scaffold(config).saver,
      copy_from_scaffold=spec.scaffold))


def whole_tables_outside_training(model_fn):
  """`model_fn` whose non-training graphs hold each sharded table whole.

  Prediction and export use `WholeTablesSaver`, evaluation on the ranks
  `RankTablesSaver`; a spec with its own Saver keeps it.

  Args:
    model_fn: model_fn(features, labels, mode, config).

  Returns:
    model_fn(features, labels, mode, config).
  """

  def with_whole_tables(features, labels, mode, config):
    if mode == tf.estimator.ModeKeys.TRAIN:
      spec = _keeping_restored_files(
          model_fn(features, labels, mode, config), config)
      return _resume_tables_whole(spec, config)
    if sharded.reading_on_ranks():
      return _rank_tables(model_fn(features, labels, mode, config))
    with sharded.whole_tables():
      spec = model_fn(features, labels, mode, config)
    keys = [t.op.name for t in
            tf.compat.v1.get_collection(sharded.WHOLE_COLLECTION)]
    split = not keys and _EXPORTING.get()
    if split:  # the tables split over parameter servers
      keys = [v._save_slice_info.full_name  # pylint: disable=protected-access
              for v in tf.compat.v1.global_variables()
              if v._save_slice_info]  # pylint: disable=protected-access
    wanted, served = compact.active(), compact.served_tables()
    if wanted is not None and wanted.changes_tables and not served:
      raise errors.ConfigError(
          f"{wanted}: min_count, last_updates and dtype apply to dynamic "
          "tables (es.dynamic_embedding, es.DynamicEmbedding, "
          "es.dynamic_embedding_column), and this model has none; give "
          "max_bytes alone")
    if not keys and wanted is None:
      return spec
    if spec.scaffold.saver is not None:
      if served:
        raise errors.ConfigError(
            "a compact export writes its tables with the framework's Saver; "
            "this model_fn's scaffold has its own")
      return spec
    return spec._replace(scaffold=tf.compat.v1.train.Scaffold(
        saver=WholeTablesSaver(keys, split, served),
        copy_from_scaffold=spec.scaffold))
  return with_whole_tables


class ShardCheckpointHook(tf.compat.v1.train.SessionRunHook):
  """Saves and restores this rank's shards; every rank runs the same
  collectives (token broadcast, a barrier per save) at the same points.

  Args:
    model_dir: the Estimator's model_dir (shared by the ranks).
    save_steps: rank 0's `save_checkpoints_steps`, or None.
    hvd: horovod.tensorflow, initialised.
  """

  def __init__(self, model_dir, save_steps, hvd):
    self._directory = os.path.join(model_dir, DIRECTORY)
    self._model_dir = model_dir
    self._save_steps = save_steps
    self._hvd = hvd
    self._save_parts = None

  def begin(self):
    variables = _sliced_variables()
    if not variables:
      return
    hvd = self._hvd
    self._checkpoint = tf.compat.v1.placeholder(tf.string, [])
    # Rank 0 says how many ranks saved: a restore by another number
    # re-shards the dynamic tables (dynamic_reshard).
    self._save_parts, parts = _save_in_blocks(
        variables, self._checkpoint,
        dynamic_reshard.ranks_tensor(hvd) if hvd.rank() == 0 else None)
    self._tables = _RankTables(hvd, variables)
    self._save_whole, self._whole_parts = _save_in_blocks(
        self._tables.deltas.whole, self._checkpoint)
    self._names = sorted({v._save_slice_info.full_name for v in variables})  # pylint: disable=protected-access
    self._step = tf.compat.v1.train.get_global_step()
    self._token_in = tf.compat.v1.placeholder(tf.int64, [])
    self._token = hvd.broadcast(self._token_in, 0,
                                name="sharded_tables_token")
    # A barrier that counts the parts every rank has written. Its count is
    # fed: Horovod's ops are registered stateless, so constant folding would
    # run an allreduce of a constant once and reuse the sum, and later saves
    # would pass the barrier alone.
    self._parts = parts
    self._parts_in = tf.compat.v1.placeholder(tf.float32, [])
    self._barrier = hvd.allreduce(self._parts_in, op=hvd.Sum,
                                  name="sharded_tables_barrier")
    self._prefixes = tf.compat.v1.placeholder(tf.string, [None])
    self._merged = tf.compat.v1.placeholder(tf.string, [])
    self._merge = tf.raw_ops.MergeV2Checkpoints(
        checkpoint_prefixes=self._prefixes, destination_prefix=self._merged,
        delete_old_dirs=False)
    self._saved_at = None
    self._full_at = None  # this session's last full save
    self._since_full = 0
    self._last = 0

  def after_create_session(self, session, coord):
    del coord
    if self._save_parts is None:
      return
    tf.io.gfile.makedirs(self._directory)
    token_file = os.path.join(self._directory, _TOKEN)
    mine = random.getrandbits(62) if self._hvd.rank() == 0 else 0
    if self._hvd.rank() == 0:
      with tf.io.gfile.GFile(token_file, "w") as f:
        f.write(str(mine))
    token = int(session.run(self._token, {self._token_in: mine}))

    def read_token():
      if not tf.io.gfile.exists(token_file):
        return None
      with tf.io.gfile.GFile(token_file) as f:
        return int(f.read() or -1)
    check_shared(self._directory, self._hvd, token, read_token)
    step = int(session.run(self._step))
    self._last = step
    if tf.train.latest_checkpoint(self._model_dir) is None or step == 0:
      return  # nothing trained yet: the initializers draw the same rows
    self._saved_at = step
    found = self._tables_source(step)
    if dynamic_reshard.ranks_saved(found[0]) != self._hvd.size():
      moments.begins("reshard")
    self._tables.restore(session, found)

  def _tables_source(self, step):
    """(checkpoint, deltas) holding the ranks' rows of `step`; ConfigError if
    none holds them."""
    merged = self._prefix(step)
    if tf.io.gfile.exists(merged + ".index"):
      return merged, []
    found = shard_deltas.chain_to(self._directory, step)
    if found:
      return found
    latest = tf.train.latest_checkpoint(self._model_dir)
    if latest and _step(latest) == step and _holds(latest, self._names):
      return latest, []
    raise errors.ConfigError(
        f"the checkpoint at step {step} in {self._model_dir} has no "
        f"sharded tables' checkpoint ({merged}) and does not hold the "
        "tables whole; restart from a checkpoint every rank saved (set "
        "save_checkpoints_steps, not save_checkpoints_secs, with sharded "
        "tables) or one process saved")

  def after_run(self, run_context, run_values):
    del run_values
    if self._save_parts is None or not self._save_steps:
      return
    # Read after the run, not fetched in it: a value read while the update
    # runs may be before or after it, and the ranks must agree.
    step = int(run_context.session.run(self._step))
    if step >= self._last + self._save_steps:
      self._save(run_context.session, step)
      self._last = step

  def end(self, session):
    if self._save_parts is None:
      return
    # A session's last save is full: what is evaluated or exported after
    # training is a merged checkpoint.
    step = int(session.run(self._step))
    if step != self._full_at:
      self._save(session, step, full=True)

  def _prefix(self, step, rank=None):
    """The merged checkpoint of `step`, or `rank`'s parts' prefix."""
    name = f"ckpt-{step}"
    if rank is not None:
      name += f"-of{self._hvd.size()}-rank{rank}"
    return os.path.join(self._directory, name)

  def _save(self, session, step, full=False):
    """Every rank writes its slices or delta; then rank 0 merges them. A
    session's first save is full, so one number of ranks writes a chain."""
    hvd = self._hvd
    rank_deltas = self._tables.deltas
    full = full or self._full_at is None or (
        self._since_full + 1 >= rank_deltas.full_every)
    moments.begins("save")
    start = time.perf_counter()
    if full:
      destination = self._prefix(step)
      session.run(self._save_parts,
                  {self._checkpoint: self._prefix(step, hvd.rank())})
      parts = self._parts
    else:
      destination = os.path.join(self._directory, deltas.DIRECTORY,
                                 str(self._full_at), f"delta-{step}")
      tf.io.gfile.makedirs(os.path.dirname(destination))
      mine = f"{destination}-of{hvd.size()}-rank{hvd.rank()}"
      session.run(self._save_whole, {self._checkpoint: mine})
      session.run(rank_deltas.save_rows, {
          rank_deltas.prefix: f"{mine}-part{self._whole_parts}",
          rank_deltas.after: self._saved_at})
      parts = self._whole_parts + 1
    written = int(session.run(self._barrier, {self._parts_in: float(parts)}))
    if hvd.rank() == 0:
      self._merge_parts(session, destination, written)
      if full:
        drop_unkept(self._directory, self._model_dir, step)
      logging.info("Sharded tables saved %s at step %d on %d ranks in %.3f s",
                   "whole" if full else "as a delta", step, hvd.size(),
                   time.perf_counter() - start)
    session.run(rank_deltas.reset)
    self._saved_at = step
    if full:
      self._full_at, self._since_full = step, 0
    else:
      self._since_full += 1

  def _merge_parts(self, session, destination, written):
    """Merges this save's `written` parts into `destination`; ConfigError if
    rank 0 does not find them all."""
    moments.begins("merge")
    size = self._hvd.size()
    parts = sorted(name[:-len(".index")] for name in tf.io.gfile.glob(
        destination + f"-of{size}-rank*-part*.index"))
    if len(parts) != written:
      raise errors.ConfigError(
          f"rank 0 finds {len(parts)} parts of the sharded tables for "
          f"{destination}, where the {size} ranks wrote {written}: every "
          "rank must write to the directory rank 0 reads, and see there "
          "what the others wrote (a shared file system)")
    merging = os.path.join(self._directory, MERGING)
    if tf.io.gfile.exists(merging):  # what a merge cut short left
      tf.io.gfile.rmtree(merging)
    tf.io.gfile.makedirs(merging)
    source = os.path.join(merging, os.path.basename(destination))
    session.run(self._merge, {self._prefixes: parts, self._merged: source})
    saving.publish(source, destination)
    tf.io.gfile.rmtree(merging)
    for name in tf.io.gfile.glob(destination + "-of*-rank*"):
      tf.io.gfile.remove(name)

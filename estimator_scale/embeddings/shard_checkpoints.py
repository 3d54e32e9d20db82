"""Checkpoints of sharded tables: every rank saves its slice, rank 0 merges.

Under Horovod only rank 0 writes the Estimator's checkpoints, and it holds
only its own rows of a sharded table (`sharded.py`). So beside each of its
checkpoints every rank saves its shard and the shard's optimizer slots, as
slices of the whole variables (TensorFlow's save-slice information), to
`<model_dir>/sharded_tables/ckpt-<step>-of<N>-rank<r>-part<k>`, a block of
rows per part (a Saver would read each variable whole, and TensorFlow copies
a variable that gathers have touched on every whole read: three copies of
the shard); once all have, rank 0 merges them (`MergeV2Checkpoints`) into
`<model_dir>/sharded_tables/ckpt-<step>`, a checkpoint of the whole
tables. A rank restoring reads its own range of rows from it, a block at
a time, whatever number of ranks wrote it, so a job restarted on another
number of ranks re-shards as it starts.

The merge writes under `<model_dir>/sharded_tables/merging/` and renames
its files into place, the index last: a merge cut short (a full disk, a
lost host) leaves no half-written checkpoint of the step for a restart to
read, only a step without merged tables, which a restart resumes before.

The merge takes the parts of this save only: N is in their names, because
a save that failed (a rank lost before every rank had written) leaves its
parts behind, and a job resumed on another number of ranks saves the same
step again with other ranges, which merged together would overlap. Rank 0
merges only once it finds as many parts as the ranks say they wrote, and
rank 0's checkpoint of the step, and so an elastic job's commit, comes
after the merge: a commit always has its whole tables.

All ranks write and read the same files, so the model_dir must be one
directory they share (a network file system, GCS, S3, HDFS): at start rank
0 writes a token there and the others must read it back, or the job stops
with one line saying so.

The ranks save at the same steps: every `save_checkpoints_steps` from the
step they started at, as rank 0's checkpoints (an elastic job's commits),
and when training ends. Rank 0's time-based checkpoints
(`save_checkpoints_secs`) have no counterpart: a restart from one of them
is refused, naming the missing file.

With `full_checkpoint_every` > 1 the saves between two full ones are
deltas of the dynamic tables' changed rows (`shard_deltas`), which a
restore and an evaluation on the ranks apply after the full save.

One process saves its tables whole in its own checkpoint, and ranks
resuming it read their ranges from there. One process resuming the ranks'
checkpoint joins rank 0's and the merged one into one it restores
(`whole-tables-ckpt-<step>` in the model_dir, which it names as its
latest); the ranks' files stay for a restart on ranks, which takes a
checkpoint one process saved as one holding its tables.

Prediction and export build each table whole (`sharded.whole_tables`);
prediction restores it from the merged checkpoint of the step being read
(`WholeTablesSaver`), while an export (`exporting`) copies it from there
into the SavedModel's variables a block of rows at a time, never holding
it; so does it with the tables split over parameter servers, from the
checkpoint itself. Evaluation of a checkpoint whose tables were merged
from the ranks' slices (`split_over_ranks`) runs on every rank: each builds
its shard and reads its rows from the merged checkpoint, a block at a time
(`RankTablesSaver`).
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
  """This rank's shards and their slots: the local variables saved as
  slices (`sharded_embedding` gives its shard slice information, and the
  optimizer's slots copy it)."""
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
  """(variable, its checkpoint name, a block's slice spec, the block's row
  ids) for each block of at most saving.BLOCK_BYTES of each variable's rows."""
  for variable in variables:
    info = variable._save_slice_info  # pylint: disable=protected-access
    for spec, first, count in _row_blocks(
        info.full_name, info.full_shape, info.var_offset, info.var_shape,
        variable.dtype):
      yield variable, info.full_name, spec, tf.range(first, first + count)


def _save_in_blocks(variables, prefix, extra=None):
  """(the op saving `variables` a block of rows at a time, the number of
  parts): one part per block, one after the other, a SaveV2 of the block,
  read by a gather, as its slice of the whole variable, to `prefix` +
  "-part<k>". The first part also holds the tensors of `extra` ({name:
  tensor}), whole."""
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
  """The op restoring `variables` from the checkpoint `prefix` a block of
  rows at a time (a whole read would hold every variable twice at once)."""
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
    token: rank 0's token (every rank holds it after a broadcast).
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
  """Removes the tables' checkpoints (merged or parts) in `directory` of
  the steps before `before` whose Estimator checkpoint in `model_dir` is
  gone: the Estimator keeps `keep_checkpoint_max` of its own, and the
  tables' of every save would otherwise fill the disk over a long run. A
  checkpoint the Estimator keeps (its latest, or one of every
  `keep_checkpoint_every_n_hours`) keeps its tables."""
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
  """The merged sharded tables' checkpoint beside Estimator's `checkpoint`
  (a path prefix), for the same global step."""
  return os.path.join(os.path.dirname(checkpoint), DIRECTORY,
                      f"ckpt-{_step(checkpoint)}")


def tables_of(checkpoint):
  """(the merged checkpoint, the deltas after it) that hold the ranks'
  tables at Estimator's `checkpoint`'s step, or None where none does."""
  merged = merged_checkpoint(checkpoint)
  if tf.io.gfile.exists(merged + ".index"):
    return merged, []
  return shard_deltas.chain_to(os.path.dirname(merged), _step(checkpoint))


def _holds(checkpoint, keys):
  """Whether `checkpoint` holds every tensor named in `keys`."""
  reader = tf.train.load_checkpoint(checkpoint)
  return all(reader.has_tensor(key) for key in keys)


def _holds_tables(checkpoint):
  """Whether `checkpoint` holds the sharded tables whole, as one process
  saves them: every table of a merged checkpoint beside it."""
  merged = [path[:-len(".index")] for path in tf.io.gfile.glob(
      os.path.join(os.path.dirname(checkpoint), DIRECTORY, "ckpt-*.index"))
            if "-of" not in os.path.basename(path)]
  if not merged:
    return False
  keys = tf.train.load_checkpoint(merged[0]).get_variable_to_shape_map()
  return _holds(checkpoint, set(keys) - {dynamic_reshard.RANKS})


def _has_tables(checkpoint):
  """Whether the ranks can restore their shards at `checkpoint`'s step: its
  tables were merged, one process saved them whole in it, or it is a step
  0, which the initializers draw."""
  return (_step(checkpoint) == 0 or tables_of(checkpoint) is not None or
          _holds_tables(checkpoint))


def resume_where_tables_were_merged(model_dir):
  """Points `model_dir`'s latest checkpoint back to the newest one whose
  sharded tables were merged, where the latest lacks them.

  Rank 0's Estimator writes its checkpoint of a step before the ranks save
  their slices (Estimator's saver is the first hook), so a rank lost in
  between leaves a checkpoint without tables, whose dense variables match
  no table. A restart after such a loss (elastic, or the job started
  again) resumes, as if that save had not begun, from the checkpoint
  before: under elastic Horovod the last commit at the latest, since a
  commit follows the merge. Does nothing
  in a model_dir without sharded tables, or without such a checkpoint (a
  restart then stops, naming the missing file).

  Returns:
    The checkpoint left behind, or None.
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
  """Within it, the graphs built are exports: their tables merged from the
  ranks' slices are copied into the SavedModel, not restored
  (`WholeTablesSaver`)."""
  token = _EXPORTING.set(True)
  try:
    yield
  finally:
    _EXPORTING.reset(token)


def _copy_in_blocks(source, keys, destination):
  """Copies the tensors `keys` of checkpoint `source` to checkpoints
  `destination`-part<k>, a block of at most saving.BLOCK_BYTES of rows each,
  in a graph of its own; returns the parts' prefixes."""
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
  """Estimator's Saver, whose restore reads the whole tables from the
  merged checkpoint of the shards when the checkpoint itself lacks them.

  A table trained whole (on one process), or split over parameter servers,
  is in Estimator's checkpoint and restores from there. What this Saver
  saves is every variable, the whole tables included: an export's
  variables. Made in an export (`exporting`), it does not restore tables
  saved in slices (merged from the ranks, or split over parameter servers)
  but copies them at its save, a block at a time, so an export holds no
  such table whole. A table one process saved whole restores whole: that
  process held it, and a block of it can only be read by reading it all.
  A compact export's tables (`compact.ServedTable`) are written from the
  checkpoint at the save, as the export keeps them; an export's size is
  checked against its budget before it is written.

  Args:
    keys: the tables' names in a checkpoint.
    split: whether they are split over parameter servers, in slices of
      Estimator's checkpoint itself.
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
    """See base class: the tables come from `merged_checkpoint(save_path)`
    unless `save_path` holds them."""
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
    """See base class: tables not restored are copied from where they are,
    beside the other variables, into one checkpoint at `save_path`."""
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
  """Raises where the tables at `checkpoint` are a full save and deltas
  (`found`, from `tables_of`), which only the ranks apply."""
  if found[1]:
    raise errors.ConfigError(
        f"checkpoint {checkpoint} holds its sharded tables as {found[0]} and "
        f"{len(found[1])} delta(s) after it, which only Horovod ranks "
        f"apply; {what} a checkpoint with a full save of the tables (the "
        "one training ended with, or one in full_checkpoint_every)")


def split_over_ranks(checkpoint):
  """Whether `checkpoint`'s tables were saved by Horovod ranks (merged
  beside it, or deltas after such a save): no process held them whole, so
  none evaluates them alone."""
  return tables_of(checkpoint) is not None


class RankTablesSaver(tf.compat.v1.train.Saver):
  """The Saver of an evaluation graph on Horovod ranks: the variables that
  are not shards from the checkpoint, then this rank's rows of each shard
  from the merged tables beside it, a block of rows at a time (a slice read
  whole would hold the shard twice), re-sharded where the ranks that saved
  them were another number.

  Args:
    shards: this rank's shards (global variables with slice information,
      `sharded.read_on_ranks`).
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
  """This rank's ops reading its rows of the tables from a merged
  checkpoint and the deltas after it, then re-sharding them.

  Args:
    hvd: horovod.tensorflow, initialised.
    sliced: this rank's variables saved as slices.
  """

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
  """`spec` of an evaluation graph built under `sharded.read_on_ranks`,
  restored by a `RankTablesSaver` (a spec with a Saver of its own keeps
  it)."""
  shards = [v for v in tf.compat.v1.global_variables()
            if getattr(v, "_save_slice_info", None) is not None]
  if not shards or spec.scaffold.saver is not None:
    return spec
  return spec._replace(scaffold=tf.compat.v1.train.Scaffold(
      saver=RankTablesSaver(shards, sharded.horovod()),
      copy_from_scaffold=spec.scaffold))


def _joined(checkpoint, merged, model_dir):
  """Writes rank 0's `checkpoint` and the ranks' tables (`merged`) as one
  checkpoint, which the model_dir's state then names as its latest;
  returns its path. One process's Saver restores a single checkpoint.

  The merge removes what it merges, so it merges copies: the ranks'
  checkpoints stay as they were, for a restart on ranks.
  """
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
  """`spec` of one process's training, resuming a checkpoint of Horovod
  ranks: its tables joined into the checkpoint it restores (`_joined`),
  and its scaffold restarting the dynamic tables' sketches. A latest
  checkpoint whose tables were never merged is passed over for the last
  merged one (`resume_where_tables_were_merged`).

  Raises:
    errors.ConfigError: several workers would resume it, each with whole
      tables of its own.
  """
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
  """`spec` whose Saver leaves the checkpoint it restored as it is
  (`resume.ResumingSaver`), where the ranks hold tables of their own and
  its scaffold has no Saver (a canned estimator's). Estimator's own Saver
  writes that checkpoint again as the session starts, without the tables,
  before the ranks read theirs from it where one process saved them
  there (`ShardCheckpointHook`)."""
  if (spec.scaffold.saver is not None or not config.model_dir or
      not _sliced_variables()):
    return spec
  return spec._replace(scaffold=tf.compat.v1.train.Scaffold(
      saver=resume.training_scaffold(config).saver,
      copy_from_scaffold=spec.scaffold))


def whole_tables_outside_training(model_fn):
  """`model_fn` whose prediction and export graphs hold every sharded table
  whole, restored by a `WholeTablesSaver`, as do its evaluation graphs but
  under `sharded.read_on_ranks` (`RankTablesSaver`). An export's Saver
  copies the tables, those split over parameter servers too.

  Args:
    model_fn: model_fn(features, labels, mode, config).

  Returns:
    model_fn(features, labels, mode, config). A spec whose scaffold already
    has a Saver keeps it.
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
  """Saves and restores this rank's shards of the sharded tables.

  Does nothing in a graph without sharded tables. Every rank runs the same
  collectives (a token broadcast at start, a barrier per save) at the same
  points: each is fetched by every rank's own session run.

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
    """(checkpoint, deltas) the ranks read their rows of `step` from: the
    ranks' merged one and the deltas after it, or the Estimator's own where
    one process saved the tables whole in it.

    Raises:
      errors.ConfigError: none holds them.
    """
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
    """The merged checkpoint of `step`, or the prefix of `rank`'s parts in
    a save by this many ranks."""
    name = f"ckpt-{step}"
    if rank is not None:
      name += f"-of{self._hvd.size()}-rank{rank}"
    return os.path.join(self._directory, name)

  def _save(self, session, step, full=False):
    """Every rank writes its slices, or its delta; once all have, rank 0
    merges them. A session's first save is full, so a chain of deltas is
    written by one number of ranks."""
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
    """Merges the `written` parts of this save into `destination`, then
    removes what an unfinished save of it by another number of ranks left.

    Raises:
      errors.ConfigError: rank 0 does not find every part the ranks wrote.
    """
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

"""Resuming a checkpoint under another recipe: what it lacks starts fresh.

Saver refuses a restore for one missing key; recipe state (AdaScale, loss
scale, slots) starts from its initializer instead, named in one line. A
missing network variable is a `ConfigError`. Every restoring process
initializes the same variables, as MWMS's broadcast initializers need.
"""
import dataclasses
import numbers
import os
from typing import Dict, Optional, Tuple

from absl import logging
import tensorflow as tf
from tensorflow.python.training.saving import saveable_object_util  # pylint: disable=g-direct-tensorflow-import

from estimator_scale import errors


@dataclasses.dataclass(frozen=True)
class _Saved:
  """A graph variable as a checkpoint stores it."""
  variables: tuple
  shape: Tuple[int, ...]
  dtype: tf.DType
  network: bool


@dataclasses.dataclass(frozen=True)
class Gap:
  """The recipe state a checkpoint lacks (its network is complete).

  Attributes:
    checkpoint: the checkpoint's path.
    fresh: checkpoint keys of the graph's variables it lacks, sorted.
    slot_owners: for each fresh slot, its network variable.
  """
  checkpoint: str
  fresh: Tuple[str, ...]
  slot_owners: Dict[str, str] = dataclasses.field(default_factory=dict)


def graph_state(network_scope=None, graph=None):
  """{checkpoint key: _Saved} of every variable a Saver would write; slots are
  told by name (`<variable>/<slot>`)."""
  graph = graph or tf.compat.v1.get_default_graph()
  with graph.as_default():
    variables = tf.compat.v1.global_variables()
    trainable = tf.compat.v1.trainable_variables()
  trainable_keys = {key for v in trainable for key in _keys(v)}
  state = {}
  for variable in variables:
    for key in _keys(variable):
      saved = state.get(key)
      shape = _full_shape(variable)
      network = (key in trainable_keys or (
          slot_owner(key, trainable_keys) is None and network_scope and
          key.startswith(network_scope + "/")))
      state[key] = _Saved(
          (saved.variables if saved else ()) + (variable,), shape,
          variable.dtype.base_dtype, bool(network))
  return state, trainable_keys


def _keys(variable):
  """Checkpoint keys a Saver writes `variable` under (a slice: its whole's)."""
  return list(saveable_object_util.op_list_to_dict([variable]))


def _full_shape(variable):
  info = getattr(variable, "_save_slice_info", None)
  if info is not None:
    return tuple(info.full_shape)
  return tuple(variable.shape.as_list())


def slot_owner(key, trainable_keys):
  """The trainable variable whose optimizer slot `key` is, or None."""
  parts = key.split("/")
  for end in range(len(parts) - 1, 0, -1):
    owner = "/".join(parts[:end])
    if owner in trainable_keys:
      return owner
  return None


def find_gap(checkpoint, state, trainable_keys):
  """What `checkpoint` lacks of the graph's `state`.

  Raises:
    errors.ConfigError: a network variable missing or differing there.
  """
  reader = tf.compat.v1.train.NewCheckpointReader(checkpoint)
  shapes = reader.get_variable_to_shape_map()
  dtypes = reader.get_variable_to_dtype_map()
  problems, fresh = [], []
  for key, saved in sorted(state.items()):
    if key not in shapes:
      if saved.network:
        problems.append(
            f"network variable {key} (shape {list(saved.shape)} in this "
            f"model) is not in checkpoint {checkpoint}")
      else:
        fresh.append(key)
    elif tuple(shapes[key]) != saved.shape:
      problems.append(
          f"variable {key} has shape {list(shapes[key])} in checkpoint "
          f"{checkpoint} but {list(saved.shape)} in this model")
    elif dtypes[key].base_dtype != saved.dtype:
      problems.append(
          f"variable {key} (shape {list(saved.shape)}) is "
          f"{dtypes[key].base_dtype.name} in checkpoint {checkpoint} but "
          f"{saved.dtype.name} in this model")
  if problems:
    more = (f" ({len(problems) - 1} more variable(s) differ too)"
            if len(problems) > 1 else "")
    raise errors.ConfigError(
        f"cannot resume: {problems[0]}{more}; resume with the model and "
        "hparams the checkpoint was trained with, or train in a new "
        "model_dir")
  owners = {}
  for key in fresh:
    owner = slot_owner(key, trainable_keys)
    if owner is not None:
      owners[key] = owner
  return Gap(checkpoint, tuple(fresh), owners)


def describe(gap):
  """The one line that names what starts fresh; slots are counted per slot
  name, since there is one per network variable."""
  named, slots = [], {}
  for key in gap.fresh:
    owner = gap.slot_owners.get(key)
    if owner is None:
      named.append(key)
    else:
      slots.setdefault(key[len(owner) + 1:], []).append(owner)
  named += [f"optimizer slot '{slot}' of {len(owners)} variable(s)"
            for slot, owners in sorted(slots.items())]
  return (f"resuming from {gap.checkpoint}, which lacks state this recipe "
          f"adds; starting it fresh: {', '.join(named)}")


class ResumingSaver(tf.compat.v1.train.Saver):
  """A Saver that restores a checkpoint lacking recipe state (see module).

  Restore ops must exist before the graph is finalized, so the gap is read
  from the latest checkpoint here and re-checked in `restore`.

  Args:
    checkpoint_dir: the model_dir.
    network_scope: the network variables' scope (non-trainable ones too).
    log: whether this process writes the line naming the fresh state.
    **saver_kwargs: tf.compat.v1.train.Saver's arguments.
  """

  def __init__(self, checkpoint_dir, network_scope=None, log=True,
               **saver_kwargs):
    super().__init__(defer_build=True, **saver_kwargs)
    self._checkpoint_dir = checkpoint_dir
    self._network_scope = network_scope
    self._log = log
    self._planned = False
    self._gap: Optional[Gap] = None
    self._state = None
    self._trainable_keys = None
    self._partial = None
    self._initialize_fresh = None
    self._restored = None  # the checkpoint this session restored

  def build(self):
    """See base class; also builds the partial restore the checkpoint needs."""
    super().build()
    if self._planned:
      return
    self._planned = True
    latest = (tf.train.latest_checkpoint(self._checkpoint_dir)
              if self._checkpoint_dir else None)
    if not latest:
      return
    self._state, self._trainable_keys = graph_state(self._network_scope)
    gap = find_gap(latest, self._state, self._trainable_keys)
    if not gap.fresh:
      return
    self._gap = gap
    # What the Saver itself writes: the global variables and any other
    # saveable object (a mutable lookup table).
    saveables = saveable_object_util.op_list_to_dict(
        tf.compat.v1.global_variables() + tf.compat.v1.get_collection(
            tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS))
    kept = {key: value for key, value in saveables.items()
            if key not in gap.fresh}
    self._partial = tf.compat.v1.train.Saver(
        var_list=kept, sharded=True, name="resume_restore")
    self._initialize_fresh = tf.compat.v1.variables_initializer(
        [v for key in gap.fresh for v in self._state[key].variables],
        name="resume_fresh_state")

  def save(self, sess, save_path, global_step=None, **kwargs):
    """See base class; skips rewriting the checkpoint just restored, which other
    processes may still be reading."""
    if (self._restored is not None and global_step is not None and
        isinstance(global_step, numbers.Integral)):
      path = f"{save_path}-{global_step}"
      if os.path.normpath(path) == self._restored:
        self._restored = None
        self._RecordLastCheckpoint(path)
        return path
    return super().save(sess, save_path, global_step=global_step, **kwargs)

  def restore(self, sess, save_path):
    """See base class: a checkpoint that lacks only recipe state restores
    what it has and initializes the rest."""
    self._restored = os.path.normpath(save_path) if save_path else None
    if self._gap is None or save_path is None:
      return super().restore(sess, save_path)
    gap = find_gap(save_path, self._state, self._trainable_keys)
    if not gap.fresh:
      return super().restore(sess, save_path)
    if gap.fresh != self._gap.fresh:
      raise errors.ConfigError(
          f"checkpoint {save_path} lacks {', '.join(gap.fresh)}, but the "
          f"job was set up for {self._gap.checkpoint}, which lacks "
          f"{', '.join(self._gap.fresh)}; another job writes to this "
          "model_dir?")
    self._partial.restore(sess, save_path)
    sess.run(self._initialize_fresh)
    if self._log:
      logging.warning("%s", describe(gap))
    return None


def training_scaffold(run_config, network_scope=None, log=True):
  """The training Scaffold whose Saver is a `ResumingSaver`.

  Args:
    run_config: the Estimator's RunConfig.
    network_scope, log: see `ResumingSaver`.
  """
  return tf.compat.v1.train.Scaffold(saver=ResumingSaver(
      run_config.model_dir, network_scope=network_scope, log=log,
      sharded=True, max_to_keep=run_config.keep_checkpoint_max,
      keep_checkpoint_every_n_hours=(
          run_config.keep_checkpoint_every_n_hours),
      save_relative_paths=True))

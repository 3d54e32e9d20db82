"""The provided factory: `make_estimator`.

It wraps tf.estimator.Estimator because tf.estimator forbids overriding
train/evaluate, which must behave alike under every backend.
"""
import contextlib
import os
from typing import List, Optional

from absl import logging
import tensorflow as tf
from tensorflow.python.util import function_utils  # pylint: disable=g-direct-tensorflow-import

from estimator_scale import canned_accumulation
from estimator_scale import embeddings
from estimator_scale import errors
from estimator_scale import hooks as hooks_lib
from estimator_scale import hparams as hparams_lib
from estimator_scale import model as model_lib
from estimator_scale import model_fn as model_fn_lib
from estimator_scale import run_config as run_config_lib
from estimator_scale import stragglers
from estimator_scale.backends import coordinator as coordinator_lib
from estimator_scale.inputs import data_files
from estimator_scale.inputs import input_fn as input_fn_lib
from estimator_scale.train_ops import adascale
from estimator_scale.train_ops import pipeline


class Estimator:
  """An Estimator whose train/evaluate/export work alike in every backend.

  Attributes:
    tf_estimator: the underlying `tf.estimator.Estimator`.
    topology: this process's `Topology`.
    model: the `BaseModel`, or None.
    training_config: the `TrainingConfig`.
    last_train: where and why the last train() ended (None before one).
    progress: the chief's `ProgressHook` of the last train(), or None.
    evaluations: every evaluation of the last `train_and_evaluate`.
  """

  def __init__(self, tf_estimator, scale_config, training_config, model=None,
               global_batch_size=None, progress_every_n_steps=100,
               scale_invariant_steps=None):
    self.model = model
    self.topology = scale_config.topology
    self.training_config = training_config
    self._scale_config = scale_config
    self._global_batch_size = global_batch_size
    self._progress_every = progress_every_n_steps
    self._scale_invariant_steps = scale_invariant_steps
    self.tf_estimator = tf_estimator
    self.last_train: Optional[coordinator_lib.TrainResult] = None
    self.progress: Optional[hooks_lib.ProgressHook] = None
    self.evaluations: List[dict] = []

  model_dir = property(lambda self: self.tf_estimator.model_dir)
  coordinator = property(lambda self: self._scale_config.coordinator)
  config = property(lambda self: self.tf_estimator.config)
  params = property(lambda self: self.tf_estimator.params)

  @property
  def last_step(self):
    """The step the last train() ended at (None before one)."""
    return self.last_train.step if self.last_train else None

  @property
  def stopped_by_signal(self):
    """Whether the last train() ended because a worker received SIGTERM."""
    return bool(self.last_train and
                self.last_train.reason is coordinator_lib.StopReason.SIGNAL)

  def model_input_fn(self, mode, global_batch_size):
    """The model's own data for `mode`, sharded for this process."""
    if self.model is None:
      raise errors.UsageError(
          "model_input_fn needs a BaseModel; this Estimator "
          "wraps a model_fn: pass your own input_fn")
    return self.model.input_fn(mode, global_batch_size, self.params,
                               self.topology,
                               self.training_config.accumulation_steps)

  def files_input_fn(self, pattern, mode, global_batch_size,
                     skip_corrupt=False, span=None):
    """The model's data from TFRecord or CSV files (`data_files.from_files`)."""
    if self.model is None:
      raise errors.UsageError("files_input_fn needs a BaseModel's feature "
                              "spec; this Estimator wraps a model_fn")
    spec = self.model.feature_spec()
    label_key = self.model.label_key if self.model.label_key in spec else None
    return data_files.from_files(
        pattern, spec, label_key, global_batch_size,
        skip_corrupt=skip_corrupt, span=span,
        training=mode == tf.estimator.ModeKeys.TRAIN, topology=self.topology,
        accumulation_steps=self.training_config.accumulation_steps,
        seed=self.config.tf_random_seed or 0)

  def _hooks(self, hooks, target):
    hooks = list(hooks or []) + list(self._scale_config.hooks)
    if self._scale_invariant_steps:
      hooks.append(hooks_lib.StopAtProgressHook(self._scale_invariant_steps))
    self.progress = None
    if self._global_batch_size and self.topology.is_chief:
      # A step is one update: one worker's share of the global batch with
      # asynchronous parameter servers.
      self.progress = hooks_lib.ProgressHook(
          self.topology.examples_per_update(self._global_batch_size),
          self._progress_every, target, self.topology)
      hooks.append(self.progress)
    if stragglers.applies(self.topology):
      workers = self.coordinator.worker_labels()  # on every worker
      if self.topology.is_chief:
        hooks.append(stragglers.StragglerHook(workers, self._progress_every))
    return hooks

  def _for_this_job(self, input_fn):
    """`input_fn` as this Estimator runs it: an `InputFn` takes its topology.

    Raises:
      ConfigError: built for another topology, or the batch does not divide.
    """
    if not isinstance(input_fn, input_fn_lib.InputFn):
      return input_fn
    return input_fn.for_estimator(self.topology,
                                  self.training_config.accumulation_steps)

  def _check_listeners(self):
    """Raises ConfigError where saving listeners would never be called."""
    refusal = self.topology.backend.listeners_refusal
    if refusal:
      raise errors.ConfigError(
          f"saving_listeners under distribution="
          f"{self.topology.backend.name}: {refusal}; use a training hook")
    if self.topology.is_chief and not coordinator_lib.saves_checkpoints(
        self.tf_estimator.config):
      raise errors.ConfigError(
          "saving_listeners: they run at each checkpoint save, and this "
          "estimator saves none; give save_checkpoints_steps")

  def train(self, input_fn, hooks=None, steps=None, max_steps=None,
            saving_listeners=None):
    """Trains `steps` more updates, or up to `max_steps`; returns self.
    `saving_listeners` run where the checkpoint is saved (the chief)."""
    if saving_listeners:
      self._check_listeners()
    input_fn = self._for_this_job(input_fn)
    if (self.topology.is_chief and
        not isinstance(input_fn, input_fn_lib.InputFn)):
      logging.warning(
          "input: %s is not built by estimator_scale.inputs, so its position "
          "is not saved: a restart starts its data over",
          getattr(input_fn, "__name__", type(input_fn).__name__))
    with data_files.naming_corrupt_files(data_files.files_of(input_fn)):
      self.last_train = self.coordinator.train(
          self.tf_estimator, input_fn, self._hooks(hooks, max_steps), steps,
          max_steps, list(saving_listeners or ()))
    return self

  def evaluate(self, input_fn, steps=None, hooks=None, checkpoint_path=None,
               name=None):
    """Evaluates the latest checkpoint; every worker gets the same metrics."""
    input_fn = self._for_this_job(input_fn)
    with data_files.naming_corrupt_files(data_files.files_of(input_fn)):
      return self.coordinator.evaluate(
          self.tf_estimator, input_fn, steps=steps, hooks=hooks,
          checkpoint_path=checkpoint_path, name=name)

  def predict(self, input_fn, predict_keys=None, hooks=None,
              checkpoint_path=None, yield_single_examples=True,
              on_ranks=False):
    """See tf.estimator.Estimator.predict; any task, even after the others
    exited. `on_ranks`: all Horovod ranks, each its own input (large-tables)."""
    input_fn = self._for_this_job(input_fn)
    return self.coordinator.predict(
        self.tf_estimator, input_fn, predict_keys=predict_keys, hooks=hooks,
        checkpoint_path=checkpoint_path,
        yield_single_examples=yield_single_examples, on_ranks=on_ranks)

  def export_saved_model(self, export_dir_base, serving_input_receiver_fn=None,
                         compact=None, **kwargs):
    """Exports a SavedModel (chief only); returns its path. `compact`: an
    `es.CompactExport` for the dynamic tables."""
    if serving_input_receiver_fn is None and self.model is None:
      raise errors.UsageError("export_saved_model around a model_fn needs "
                              "serving_input_receiver_fn")
    if compact is not None and not isinstance(compact,
                                              embeddings.CompactExport):
      raise errors.UsageError(
          f"export_saved_model: compact={compact!r}; valid: an "
          "es.CompactExport, or None")
    receiver = (serving_input_receiver_fn or
                self.model.serving_input_receiver_fn())
    checkpoint = kwargs.pop("checkpoint_path", None) or self.latest_checkpoint()
    with embeddings.exporting(checkpoint, compact), \
        _no_temp_left(export_dir_base):
      return self.coordinator.export(self.tf_estimator, export_dir_base,
                                     receiver, checkpoint_path=checkpoint,
                                     **kwargs)

  def get_variable_value(self, name):
    return self.tf_estimator.get_variable_value(name)

  def get_variable_names(self):
    return self.tf_estimator.get_variable_names()

  def latest_checkpoint(self):
    return self.tf_estimator.latest_checkpoint()


@contextlib.contextmanager
def _no_temp_left(export_dir_base):
  """Removes the temp-<timestamp> dir a failed export left in the base."""
  base = os.fsdecode(export_dir_base)
  before = (set(tf.io.gfile.listdir(base)) if tf.io.gfile.isdir(base)
            else set())
  try:
    yield
  except Exception:
    if tf.io.gfile.isdir(base):
      for name in set(tf.io.gfile.listdir(base)) - before:
        if name.startswith("temp-"):
          tf.io.gfile.rmtree(os.path.join(base, name))
    raise


def make_estimator(model, model_dir=None, distribution="none",
                   training_config=None, hparams="", scale_config=None,
                   global_batch_size=None, progress_every_n_steps=100,
                   scale_invariant_steps=None, **run_config_kwargs):
  """The Estimator for `model` under `distribution`.

  Args:
    model: a `BaseModel`; a model_fn training through `build_train_op`
      (with `params`, it gets `hparams`); or a `tf.estimator.Estimator` made
      with `config=scale_config.run_config` and `canned_optimizer`s.
    model_dir: checkpoint directory, shared by all workers.
    distribution: a backend name for `build_run_config`.
    training_config: `TrainingConfig`; not for an existing Estimator.
    hparams: overrides of `default_hparams`, "a=1,b=2" or a dict.
    scale_config: a `build_run_config` result (then leave `distribution`
      and `run_config_kwargs`); required with an existing Estimator.
    global_batch_size: when given, the chief logs progress lines.
    progress_every_n_steps: how often.
    scale_invariant_steps: stop when AdaScale's tau reaches this.
    **run_config_kwargs: passed to `build_run_config`.

  Returns:
    `Estimator`.
  """
  existing = isinstance(model, tf.estimator.Estimator)
  if existing and scale_config is None:
    raise errors.UsageError(
        "an existing Estimator needs scale_config=, the build_run_config "
        "result whose run_config it was made with")
  if existing and training_config is not None:
    raise errors.UsageError(
        "training_config does not apply to an existing Estimator: its "
        "optimizers are inside it; give them es.canned_optimizer(..., "
        "lr_scaling=...)")
  given_config = training_config
  training_config = training_config or pipeline.TrainingConfig()
  if scale_config is None:
    scale_config = run_config_lib.build_run_config(
        distribution, model_dir=model_dir, **run_config_kwargs)
  elif run_config_kwargs or distribution != "none" or model_dir is not None:
    raise errors.UsageError(
        "pass either scale_config or distribution/model_dir/run config "
        "arguments, not both")
  if (scale_invariant_steps and not existing and
      training_config.lr_scaling != "adascale"):
    raise errors.ConfigError(
        f"scale_invariant_steps={scale_invariant_steps} needs "
        "lr_scaling='adascale'")
  scale_config.topology.backend.check_offers(
      training_config.allreduce_compression, training_config.sparse_exchange)
  if training_config.lr_scaling == "adascale":
    # Fail at construction, not at the first train(), for an impossible S.
    topology = scale_config.topology
    adascale.check_samples(training_config.resolved_scale(topology),
                           training_config.samples_per_update(topology))
  if existing:
    _check_made_with(model, scale_config.run_config)
    tf_estimator, model = model, None
  elif isinstance(model, model_lib.BaseModel):
    tf_estimator = tf.estimator.Estimator(
        model_fn_lib.make_model_fn(model, training_config,
                                   scale_config.topology),
        config=scale_config.run_config,
        params=hparams_lib.parse(model.default_hparams(), hparams))
  elif isinstance(model, type) and issubclass(model, model_lib.BaseModel):
    raise errors.UsageError(f"model must be a BaseModel instance: pass "
                            f"{model.__name__}(), not the class")
  elif callable(model):
    tf_estimator = tf.estimator.Estimator(
        model, config=scale_config.run_config,
        params=_model_fn_params(model, hparams))
    model = None
  else:
    raise errors.UsageError(
        "model must be a BaseModel instance, an Estimator model_fn or a "
        f"tf.estimator.Estimator, got {type(model).__name__}")
  tf_estimator = _with_placed_variables(tf_estimator, scale_config,
                                        given_config)
  return Estimator(tf_estimator, scale_config, training_config, model=model,
                   global_batch_size=global_batch_size,
                   progress_every_n_steps=progress_every_n_steps,
                   scale_invariant_steps=scale_invariant_steps)


def _with_placed_variables(tf_estimator, scale_config, training_config):
  """The Estimator with variables placed (`embeddings.place_variables`),
  rebuilt around the model_fn, where canned estimators make them."""
  placed = embeddings.place_variables(
      canned_accumulation.with_accumulation(tf_estimator),
      scale_config.run_config.num_ps_replicas, scale_config.topology,
      scale_config.full_checkpoint_every)

  # tf.distribute runs the model_fn through autograph in every process,
  # which takes seconds and wraps the user's errors; Estimator alone does
  # not. Estimator reads the model_fn's arguments, which do_not_convert's
  # wrapper hides, so the wrapper sits one call down.
  @tf.autograph.experimental.do_not_convert
  def build(features, labels, mode, params, config):
    pipeline.declare_estimator(training_config, scale_config.topology)
    model_fn_lib.seed_layer_initializers(config)
    return placed(features, labels, mode, params, config)

  def model_fn(features, labels, mode, params, config):
    return build(features, labels, mode, params, config)
  return tf.estimator.Estimator(
      model_fn, config=run_config_lib.for_the_factory(tf_estimator.config),
      params=tf_estimator.params,
      warm_start_from=tf_estimator._warm_start_settings)  # pylint: disable=protected-access


def _model_fn_params(model_fn, hparams):
  """The params for `model_fn`: None unless it takes them (else tf refuses)."""
  args = function_utils.fn_args(model_fn)
  if "features" not in args:
    raise errors.UsageError(
        f"model_fn {getattr(model_fn, '__name__', model_fn)!r} must take a "
        "`features` argument (and any of labels, mode, params, config), as "
        f"tf.estimator requires; it takes ({', '.join(args)})")
  if hparams and not isinstance(hparams, dict):
    raise errors.UsageError(
        "hparams of a model_fn must be a dict (its params), "
        f"got {hparams!r}")
  if "params" in args:
    return dict(hparams or {})
  if hparams:
    raise errors.UsageError(
        f"hparams={hparams!r} given, but the model_fn takes no `params` "
        "argument to receive them")
  return None


_RUN_CONFIG_FIELDS = ("model_dir", "tf_random_seed", "save_checkpoints_steps",
                      "save_checkpoints_secs", "save_summary_steps",
                      "log_step_count_steps", "keep_checkpoint_max",
                      "num_worker_replicas", "task_type", "task_id",
                      "is_chief")


def _check_made_with(estimator, run_config):
  """Refuses an Estimator whose (copied) RunConfig is not the backend's."""
  made = estimator.config
  differ = [name for name in _RUN_CONFIG_FIELDS
            if getattr(made, name) != getattr(run_config, name)]
  strategies = (made.train_distribute, run_config.train_distribute)
  if type(strategies[0]) is not type(strategies[1]):
    differ.append("train_distribute")
  if run_config.session_config is not None and (
      made.session_config != run_config.session_config):
    differ.append("session_config")
  if differ:
    raise errors.ConfigError(
        f"{type(estimator).__name__} was not made with the backend's "
        f"RunConfig ({', '.join(differ)} differ): make it with "
        "config=scale_config.run_config")

"""The provided factory: `make_estimator`.

`make_estimator` returns an `Estimator` with tf.estimator.Estimator's
methods, around a `BaseModel` or a hand-written model_fn. It wraps rather
than subclasses because tf.estimator forbids overriding train/evaluate, and
those are what must behave the same under every backend (see
coordination.py).
"""
import tensorflow as tf

from estimator_scale import backends
from estimator_scale import data_files
from estimator_scale import errors
from estimator_scale import hooks as hooks_lib
from estimator_scale import hparams as hparams_lib
from estimator_scale import model as model_lib
from estimator_scale import model_fn as model_fn_lib
from estimator_scale import run_config as run_config_lib
from estimator_scale.train_ops import adascale
from estimator_scale.train_ops import pipeline


class Estimator:
  """An Estimator whose train/evaluate/export work alike in every backend.

  Attributes:
    tf_estimator: the underlying `tf.estimator.Estimator`.
    topology: this process's `Topology`.
    model: the `BaseModel`, or None around a hand-written model_fn.
    training_config: the `TrainingConfig`.
  """

  def __init__(self, model_fn, scale_config, training_config, params,
               model=None, global_batch_size=None, progress_every_n_steps=100,
               scale_invariant_steps=None):
    self.model = model
    self.topology = scale_config.topology
    self.training_config = training_config
    self._scale = scale_config
    self._global_batch_size = global_batch_size
    self._progress_every = progress_every_n_steps
    self._scale_invariant_steps = scale_invariant_steps
    self.tf_estimator = tf.estimator.Estimator(
        model_fn, config=scale_config.run_config, params=params)
    self.evaluations = []
    """Every evaluation of the last `train_and_evaluate`, in step order."""

  model_dir = property(lambda self: self.tf_estimator.model_dir)
  coordinator = property(lambda self: self._scale.coordinator)
  config = property(lambda self: self.tf_estimator.config)
  params = property(lambda self: self.tf_estimator.params)

  @property
  def stopped_by_signal(self):
    """Whether the last train() ended because a worker received SIGTERM."""
    return self._scale.coordinator.stopped_by_signal

  def model_input_fn(self, mode, global_batch_size):
    """The model's own data for `mode`, sharded for this process."""
    if self.model is None:
      raise errors.ConfigError(
          "model_input_fn needs a BaseModel; this Estimator "
          "wraps a model_fn: pass your own input_fn")
    return self.model.input_fn(mode, global_batch_size, self.params,
                               self.topology,
                               self.training_config.accumulation_steps)

  def files_input_fn(self, pattern, mode, global_batch_size,
                     skip_corrupt=False):
    """The model's data from TFRecord or CSV files, sharded for this process.

    Parsed by the model's `feature_spec`; see `data_files.from_files`.
    """
    if self.model is None:
      raise errors.UsageError("files_input_fn needs a BaseModel's feature "
                              "spec; this Estimator wraps a model_fn")
    spec = self.model.feature_spec()
    label_key = self.model.label_key if self.model.label_key in spec else None
    return data_files.from_files(
        pattern, spec, label_key, global_batch_size,
        skip_corrupt=skip_corrupt,
        training=mode == tf.estimator.ModeKeys.TRAIN, topology=self.topology,
        accumulation_steps=self.training_config.accumulation_steps,
        seed=self.config.tf_random_seed or 0)

  def _hooks(self, hooks, target):
    hooks = list(hooks or []) + list(self._scale.hooks)
    if self._scale_invariant_steps:
      hooks.append(hooks_lib.StopAtProgressHook(self._scale_invariant_steps))
    if self._global_batch_size and self.topology.is_chief:
      self.progress = hooks_lib.ProgressHook(
          self._global_batch_size, self._progress_every, target)
      hooks.append(self.progress)
    return hooks

  def train(self, input_fn, hooks=None, steps=None, max_steps=None):
    """Trains `steps` more updates, or up to update `max_steps`.

    Returns:
      self, like tf.estimator.Estimator.train.
    """
    with data_files.naming_corrupt_files(input_fn):
      self.last_step = self._scale.coordinator.train(
          self.tf_estimator, input_fn, self._hooks(hooks, max_steps), steps,
          max_steps)
    return self

  def evaluate(self, input_fn, steps=None, hooks=None, checkpoint_path=None,
               name=None):
    """Evaluates the latest checkpoint; every worker gets the same metrics."""
    with data_files.naming_corrupt_files(input_fn):
      return self._scale.coordinator.evaluate(
          self.tf_estimator, input_fn, steps=steps, hooks=hooks,
          checkpoint_path=checkpoint_path, name=name)

  def predict(self, input_fn, predict_keys=None, hooks=None,
              checkpoint_path=None, yield_single_examples=True):
    """See tf.estimator.Estimator.predict."""
    return self.tf_estimator.predict(
        input_fn, predict_keys=predict_keys, hooks=hooks,
        checkpoint_path=checkpoint_path,
        yield_single_examples=yield_single_examples)

  def export_saved_model(self, export_dir_base, serving_input_receiver_fn=None,
                         **kwargs):
    """Exports a SavedModel (the chief only); returns its path."""
    if serving_input_receiver_fn is None and self.model is None:
      raise errors.ConfigError("export_saved_model around a model_fn needs "
                               "serving_input_receiver_fn")
    receiver = (serving_input_receiver_fn or
                self.model.serving_input_receiver_fn())
    return self._scale.coordinator.export(self.tf_estimator, export_dir_base,
                                          receiver, **kwargs)

  def get_variable_value(self, name):
    return self.tf_estimator.get_variable_value(name)

  def get_variable_names(self):
    return self.tf_estimator.get_variable_names()

  def latest_checkpoint(self):
    return self.tf_estimator.latest_checkpoint()


def make_estimator(model, model_dir=None, distribution="none",
                   training_config=None, hparams="", scale_config=None,
                   global_batch_size=None, progress_every_n_steps=100,
                   scale_invariant_steps=None, **run_config_kwargs):
  """The Estimator for `model` under `distribution`.

  Args:
    model: a `BaseModel` instance, or a hand-written Estimator model_fn
      that trains through `build_train_op` (then `hparams` is its params
      dict).
    model_dir: checkpoint directory (shared by all workers).
    distribution: a backend name for `build_run_config`.
    training_config: `TrainingConfig`.
    hparams: overrides of the model's `default_hparams`, "a=1,b=2" or a dict.
    scale_config: an existing `build_run_config` result (then `distribution`
      and `run_config_kwargs` are not used and must be left at defaults).
    global_batch_size: when given, the chief logs progress lines.
    progress_every_n_steps: how often it logs them.
    scale_invariant_steps: stop when AdaScale's tau reaches this.
    **run_config_kwargs: passed to `build_run_config`.

  Returns:
    `Estimator`.
  """
  training_config = training_config or pipeline.TrainingConfig()
  if scale_config is None:
    scale_config = run_config_lib.build_run_config(
        distribution, model_dir=model_dir, **run_config_kwargs)
  elif run_config_kwargs or distribution != "none":
    raise errors.ConfigError(
        "pass either scale_config or distribution/run config "
        "arguments, not both")
  if scale_invariant_steps and training_config.lr_scaling != "adascale":
    raise errors.ConfigError(
        f"scale_invariant_steps={scale_invariant_steps} needs "
        "lr_scaling='adascale'")
  with errors.as_config_error():
    backends.get(scale_config.topology.backend).check_compression(
        training_config.allreduce_compression)
  if training_config.lr_scaling == "adascale":
    # Fail at construction, not at the first train(), for an impossible S.
    topology = scale_config.topology
    with errors.as_config_error():
      adascale.check_samples(training_config.resolved_scale(topology),
                             training_config.samples_per_update(topology))
  if isinstance(model, model_lib.BaseModel):
    model_fn = model_fn_lib.make_model_fn(model, training_config,
                                          scale_config.topology)
    params = hparams_lib.parse(model.default_hparams(), hparams)
  elif isinstance(model, type) and issubclass(model, model_lib.BaseModel):
    raise errors.UsageError(f"model must be a BaseModel instance: pass "
                            f"{model.__name__}(), not the class")
  elif callable(model):
    if hparams and not isinstance(hparams, dict):
      raise errors.ConfigError(
          "hparams of a model_fn must be a dict (its params), "
          f"got {hparams!r}")
    model_fn, params, model = model, dict(hparams or {}), None
  else:
    raise errors.UsageError(
        "model must be a BaseModel instance or an Estimator "
        f"model_fn, got {type(model).__name__}")
  return Estimator(model_fn, scale_config, training_config, params,
                   model=model, global_batch_size=global_batch_size,
                   progress_every_n_steps=progress_every_n_steps,
                   scale_invariant_steps=scale_invariant_steps)


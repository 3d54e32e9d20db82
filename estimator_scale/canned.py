"""Optimizers for canned estimators: the backend's reduction and lr rules, in
`get_updates` (their only hook), from `update` as `build_train_op`'s. The
reducer averages even under tf.distribute: AdaScale needs the mean, and TF
2.15's strategies fail on sparse gradients the reducer pads."""
import contextlib
import dataclasses
import functools
import threading
from typing import Any

import tensorflow as tf
from tensorflow.python.ops import variables as tf_variables  # pylint: disable=g-direct-tensorflow-import

from estimator_scale import errors
from estimator_scale.backends import base
from estimator_scale.embeddings import deltas
from estimator_scale.embeddings import dynamic
from estimator_scale.embeddings import sharded
from estimator_scale.train_ops import accumulation
from estimator_scale.train_ops import adascale
from estimator_scale.train_ops import cowclip
from estimator_scale import gradients
from estimator_scale.train_ops import parts
from estimator_scale.train_ops import pipeline
from estimator_scale.train_ops import update

_CANNED_LINEAR_SCOPE = "linear/linear_model/"
"""Where TF's canned estimators make their linear model's weights."""

CANNED_NAMES = ("Adagrad", "Adam", "Ftrl", "RMSProp", "SGD")
"""The optimizer names TF 2.15's canned estimators take, each meaning its
`tf.keras.optimizers.legacy` class."""


def _legacy_class(name):
  legacy = tf.keras.optimizers.legacy
  return {"Adagrad": legacy.Adagrad, "Adam": legacy.Adam, "Ftrl": legacy.Ftrl,
          "RMSProp": legacy.RMSprop, "SGD": legacy.SGD}[name]


def _what_to_pass(optimizer):
  """The one-line refusal of an optimizer canned estimators do not take."""
  kind = type(optimizer).__name__
  example = "tf.keras.optimizers.legacy.Adagrad(learning_rate=0.05)"
  if isinstance(optimizer, tf.keras.optimizers.Optimizer):
    # Keras 2.11+'s optimizers: canned estimators refuse them in graph mode.
    return (f"optimizer={kind} is a Keras optimizer canned estimators "
            "refuse in graph mode; pass "
            f"tf.keras.optimizers.legacy.{kind}(...) instead")
  if isinstance(optimizer, tf.compat.v1.train.Optimizer):
    return (f"optimizer={kind} is a TF1 optimizer, which TF 2.15's canned "
            "estimators refuse; pass a tf.keras.optimizers.legacy optimizer, "
            f"e.g. {example}")
  if isinstance(optimizer, str):
    return (f"optimizer={optimizer!r} is not a name canned estimators take; "
            f"pass one of {', '.join(CANNED_NAMES)} or a "
            f"tf.keras.optimizers.legacy optimizer, e.g. {example}")
  if isinstance(optimizer, type) or callable(optimizer):
    return (f"optimizer={optimizer!r} is not an optimizer: pass the "
            f"optimizer itself, e.g. {example} (canned_optimizer makes a new "
            "one in every training graph)")
  return (f"optimizer={optimizer!r} ({kind}) is not an optimizer canned "
          f"estimators take; pass a tf.keras.optimizers.legacy optimizer, "
          f"e.g. {example}")


def _class_and_config(optimizer):
  """(legacy optimizer class, its config): an instance cannot be shared
  between the graphs Estimator builds, so each rebuilds it."""
  if isinstance(optimizer, str) and optimizer in CANNED_NAMES:
    optimizer = _legacy_class(optimizer)()
  if not isinstance(optimizer, tf.keras.optimizers.legacy.Optimizer):
    raise errors.ConfigError(_what_to_pass(optimizer))
  try:
    config = optimizer.get_config()
  except (TypeError, ValueError) as e:
    raise errors.ConfigError(
        f"optimizer={type(optimizer).__name__}: its config cannot be read "
        f"({e}); give its learning rate as a number or a "
        "tf.keras.optimizers.schedules.LearningRateSchedule") from None
  return type(optimizer), config


def _base_schedule(learning_rate):
  """step -> the S = 1 learning rate, from an optimizer config's value."""
  if isinstance(learning_rate, dict):
    learning_rate = tf.keras.optimizers.schedules.deserialize(learning_rate)
  if isinstance(learning_rate,
                tf.keras.optimizers.schedules.LearningRateSchedule):
    return lambda step: tf.cast(learning_rate(step), tf.float32)
  return lambda step: tf.constant(float(learning_rate), tf.float32)


@dataclasses.dataclass(frozen=True)
class _Plan:
  """`config`'s rule at the optimizer's own S = 1 `schedule`, in every graph."""
  topology: Any
  config: pipeline.TrainingConfig
  schedule: Any
  name: str


class CannedOptimizer:
  """The callable a canned estimator's `optimizer` argument takes; `plan`:
  what it does besides applying."""

  def __init__(self, optimizer_class, config, plan):
    self._class = optimizer_class
    self._config = config
    self.plan = plan

  def __call__(self):
    rate = _Rate()
    optimizer = _reducing_class(self._class).from_config(
        dict(self._config, learning_rate=rate))
    optimizer.attach(self.plan, rate, self._config)
    return optimizer

  def __repr__(self):
    config = self.plan.config
    return (f"canned_optimizer({self._class.__name__}, "
            f"accumulation_steps={config.accumulation_steps}, "
            f"lr_scaling={config.lr_scaling!r}, "
            f"batch_scale={config.resolved_scale(self.plan.topology):g})")


class _Rate:
  """The learning rate as a callable hyperparameter, set by `get_updates`."""

  def __init__(self):
    self.value = None

  def __call__(self):
    if self.value is None:
      raise errors.UsageError(
          "this optimizer's learning rate is made by get_updates(loss, "
          "variables), the call canned estimators make; apply_gradients "
          "alone would skip the reduction across workers")
    return self.value


def canned_optimizer(optimizer, topology, accumulation_steps=1,
                     lr_scaling="identity", batch_scale=None,
                     scaling_warmup_updates=0, adascale_smoothing=None,
                     allreduce_compression="none", cowclip_ratio=None,
                     cowclip_min_norm=None):
  """An optimizer for a canned estimator that trains with the job's backend.

  Build the estimator with `config=scale_config.run_config`; train it
  through `make_estimator(estimator, scale_config=...)`.

  Args:
    optimizer: a `tf.keras.optimizers.legacy` optimizer (its rate the S = 1
      one), or a name in `CANNED_NAMES`.
    topology: this process's `Topology` (or the `ScaleConfig` holding it).
    accumulation_steps: k; the same for every optimizer of one estimator.
    lr_scaling: one of `choices.LR_SCALING_RULES`; under `cowclip` the
      linear model's weights (`linear/linear_model/`) are not clipped.
    batch_scale: S; None means replicas x accumulation_steps.
    scaling_warmup_updates: `linear` rule's warm-up length in updates.
    adascale_smoothing: AdaScale's theta (None: its default).
    allreduce_compression: where the backend offers it (Horovod: fp16).
    cowclip_ratio, cowclip_min_norm: CowClip's r > 0 and zeta >= 0.

  Returns:
    A `CannedOptimizer`: a zero-argument callable returning the optimizer.

  Raises:
    ConfigError: a refused optimizer, or settings this topology cannot run.
  """
  if isinstance(topology, base.ScaleConfig):
    topology = topology.topology
  optimizer_class, config = _class_and_config(optimizer)
  _check_accumulation_steps(accumulation_steps, config)
  samples = topology.replicas_per_update * accumulation_steps
  topology.backend.check_offers(allreduce_compression)
  training_config = pipeline.TrainingConfig(
      accumulation_steps=accumulation_steps, lr_scaling=lr_scaling,
      batch_scale=batch_scale, scaling_warmup_updates=scaling_warmup_updates,
      adascale_smoothing=adascale_smoothing,
      allreduce_compression=allreduce_compression,
      cowclip_ratio=cowclip_ratio, cowclip_min_norm=cowclip_min_norm)
  if lr_scaling == "adascale":
    adascale.check_samples(training_config.resolved_scale(topology), samples)
  plan = _Plan(topology=topology, config=training_config,
               schedule=_base_schedule(config.get("learning_rate", 0.001)),
               name=config.get("name") or optimizer_class.__name__)
  return CannedOptimizer(optimizer_class, config, plan)


def _check_accumulation_steps(accumulation_steps, config):
  if (not isinstance(accumulation_steps, int) or
      isinstance(accumulation_steps, bool) or accumulation_steps < 1):
    raise errors.ConfigError(f"accumulation_steps={accumulation_steps!r} "
                             "must be an integer >= 1")
  clipped = [key for key in ("clipnorm", "clipvalue", "global_clipnorm")
             if config.get(key) is not None]
  if accumulation_steps > 1 and clipped:
    raise errors.ConfigError(
        f"accumulation_steps={accumulation_steps} with {clipped[0]}= on the "
        "optimizer: whether to clip each micro-batch's gradient or their "
        "mean is ambiguous; clip in the model, or use accumulation_steps=1")


class _Recording(threading.local):
  """The recorder of the accumulation loop being traced, if any."""
  recorder = None


_RECORDING = _Recording()


@contextlib.contextmanager
def recording(recorder):
  """Inside, canned optimizers' `get_updates` calls go to `recorder.add`."""
  _RECORDING.recorder = recorder
  try:
    yield
  finally:
    _RECORDING.recorder = None


class _Reducing:
  """Mixed in before a legacy optimizer's class: `get_updates` reduces, scales
  and applies, in one op."""

  def attach(self, plan, rate, config):
    self._es_plan = plan
    self._es_rate = rate
    self._es_config = config

  def get_updates(self, loss, params):
    """See base class."""
    params = list(params)
    if _RECORDING.recorder is not None:
      _RECORDING.recorder.add(self, loss, params)
      return [tf.no_op()]
    plan = self._es_plan
    if plan.config.accumulation_steps > 1:
      raise errors.UsageError(
          "canned_optimizer(accumulation_steps="
          f"{plan.config.accumulation_steps}) "
          "accumulates only in an Estimator made by es.make_estimator, which "
          "runs the network over the micro-batches; give the canned "
          "estimator to es.make_estimator(estimator, scale_config=...)")
    grads = self.get_gradients(loss, params)
    if plan.config.lr_scaling == cowclip.RULE:
      grads = [cowclip.with_counts(g, v) for g, v in zip(grads, params)]
    samples = self._samples(grads)
    sum_squared = (gradients.total_squared_norm(samples)
                   if plan.config.lr_scaling == "adascale" else None)
    return [self._reduce_and_apply(samples, params, sum_squared, loss)]

  def apply_accumulated(self, mean, params, sum_squared, loss):
    """The train op for `mean`, the k micro-batches' mean gradients of `params`
    (`sum_squared`: AdaScale's summed norms; `loss`: the mean loss)."""
    in_sync = float(pipeline.replicas_in_sync(self._es_plan.topology))
    if sum_squared is not None:
      sum_squared = sum_squared * in_sync ** 2
    return self._reduce_and_apply(self._samples(mean), params, sum_squared,
                                  loss)

  def _samples(self, grads):
    """This replica's gradients times N: the canned head divided each replica's
    loss by N, and AdaScale's per-replica norms need g_i."""
    in_sync = float(pipeline.replicas_in_sync(self._es_plan.topology))
    if self._es_plan.config.lr_scaling == cowclip.RULE:
      return [cowclip.scale_values(g, in_sync) for g in grads]
    return [gradients.scale(g, in_sync) for g in grads]

  def _reduce_and_apply(self, samples, params, sum_squared, loss):
    """The train op of this optimizer in one replica's graph."""
    plan = self._es_plan
    _check_tables(params, plan)
    if plan.config.lr_scaling == cowclip.RULE:
      parts.mark_linear(v for v in params
                        if v.op.name.startswith(_CANNED_LINEAR_SCOPE))
    global_step = tf.compat.v1.train.get_or_create_global_step()
    reducer = plan.topology.backend.make_reducer(
        plan.config.allreduce_compression)
    grads = accumulation.Gradients(samples, params, loss, sum_squared)
    if not reducer.applies_updates:
      # A synchronous parameter server's worker: the chief applies.
      return reducer.contribute(samples, params,
                                update.norm_sums(plan.config, grads), loss)
    reducer.expect(params, loss)
    scaled = update.reduce_and_scale(
        reducer, grads, plan.config, plan.topology, schedule=plan.schedule,
        reduce=True, state_scope=self._state_scope(global_step))
    self._es_rate.value = scaled.rate
    # Equal on every replica already: a strategy must not sum them again
    # (nor could it, in TF 2.15's graph mode, for sparse gradients of
    # different lengths; the backend's reducer pads them).
    dynamic.check_trainers(plan.topology)
    pairs = list(zip(scaled.mean, params))
    if scaled.table_rate is not None:
      applied = self._apply_tables_apart(pairs, scaled)
    else:
      dynamic.reset_slots_on_admission(self)
      applied = self.apply_gradients(pairs,
                                     experimental_aggregate_gradients=False)
    applied = reducer.applied(applied)
    _keep_slots_per_rank(self, params)
    return tf.group(applied, *scaled.writes)

  def _apply_tables_apart(self, pairs, scaled):
    """Tables through a second optimizer of this class at the tables' rate."""
    tables = _Rate()
    tables.value = scaled.table_rate
    name = self._es_config.get("name") or type(self).__name__
    sibling = type(self).from_config(
        dict(self._es_config, learning_rate=tables, name=f"{name}Tables"))
    dynamic.reset_slots_on_admission(self)
    dynamic.reset_slots_on_admission(sibling)
    sparse = [isinstance(g, tf.IndexedSlices) for g, _ in pairs]
    return tf.group(
        self.apply_gradients([p for p, s in zip(pairs, sparse) if not s],
                             experimental_aggregate_gradients=False),
        sibling.apply_gradients([p for p, s in zip(pairs, sparse) if s],
                                experimental_aggregate_gradients=False))

  def _state_scope(self, global_step):
    """`adascale` for the optimizer that counts global_step, else its own."""
    if any(weight is global_step for weight in self.weights):
      return adascale.SCOPE
    return f"{adascale.SCOPE}/{self._es_plan.name}"


def _check_tables(params, plan):
  """Refuses Horovod-split tables a canned optimizer does not train.

  Raises:
    errors.UsageError: naming the table, why, and what trains it.
  """
  for variable in params:
    if not sharded.is_sharded(variable):
      continue
    if dynamic.table_of(variable) is None:
      raise errors.UsageError(_sharded_refusal(variable.op.name))
    refusal = _dynamic_refusal(variable.op.name, plan)
    if refusal:
      raise errors.UsageError(refusal)


def _sharded_refusal(name):
  return (f"a canned estimator does not train the sharded table {name} "
          "(es.sharded_embedding_column) on Horovod ranks; use "
          "es.dynamic_embedding_column or tf.feature_column.embedding_column "
          "in a canned estimator, or the sharded column in a model of your "
          "own (es.BaseModel or a model_fn with es.build_train_op)")


def _dynamic_refusal(name, plan):
  """Why dynamic table `name` cannot train on ranks with `plan`, or None."""
  if plan.config.lr_scaling == "adascale":
    setting = "lr_scaling='adascale'"
  elif plan.config.accumulation_steps > 1:
    setting = f"accumulation_steps={plan.config.accumulation_steps}"
  else:
    return None
  return (f"a canned estimator cannot train the dynamic table {name} "
          f"(es.dynamic_embedding_column) on Horovod ranks with {setting}: "
          "each rank's gradient of its rows is known only after the ranks "
          "exchange them, and the canned optimizer reads it before; use "
          "another lr_scaling with accumulation_steps=1, or the dynamic "
          "column in a model of your own (es.BaseModel or a model_fn with "
          "es.build_train_op), or one process")


def _keep_slots_per_rank(optimizer, params):
  """Makes a dynamic table's Keras slots rank-own like its rows: out of the
  broadcast, saved as this rank's slice (`deltas.record_slots`)."""
  sharded.keep_slots_local(optimizer, params)
  for variable in params:
    if not sharded.is_sharded(variable):
      continue
    info = variable._save_slice_info  # pylint: disable=protected-access
    slots = [optimizer.get_slot(variable, name)
             for name in optimizer.get_slot_names()]
    for slot in slots:
      slot._set_save_slice_info(tf_variables.Variable.SaveSliceInfo(  # pylint: disable=protected-access
          slot.op.name, info.full_shape, info.var_offset, info.var_shape))
    deltas.record_slots(variable, slots)


@functools.lru_cache(maxsize=None)
def _reducing_class(optimizer_class):
  """`optimizer_class` with `_Reducing` first in its bases, made once."""
  return type(optimizer_class.__name__, (_Reducing, optimizer_class), {})

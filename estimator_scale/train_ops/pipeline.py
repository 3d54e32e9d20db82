"""loss -> gradients -> accumulate -> reduce -> scale lr -> apply, in one place.

Only wiring, so the order of the stages is visible in one function; the
reduce and scale stage (`update`) is the one canned estimators take too.
"""
import contextlib
import dataclasses
from typing import Optional, Tuple

import tensorflow as tf

from estimator_scale import choices
from estimator_scale import errors
from estimator_scale import graph_state
from estimator_scale import input_wait
from estimator_scale import topology as topology_lib
from estimator_scale import stragglers
from estimator_scale.embeddings import dynamic
from estimator_scale.train_ops import accumulation
from estimator_scale.train_ops import adascale
from estimator_scale.train_ops import cowclip
from estimator_scale.train_ops import optimizers
from estimator_scale.train_ops import parts
from estimator_scale import precision as precision_lib
from estimator_scale.train_ops import scaling
from estimator_scale.train_ops import schedules
from estimator_scale.train_ops import update

MICRO_BATCHES = "accumulation/micro_batches"


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
  """How a loss becomes updates; each field but the option tuples is a flag.

  Attributes:
    optimizer, linear_optimizer: names of `optimizers.OPTIMIZERS`, the second
      for variables built in `linear_part()` (None: `optimizer`).
    optimizer_options, linear_optimizer_options: their settings.
    learning_rate: the S = 1 rate at step 0 (after warm-up).
    lr_schedule: a name of `schedules.SCHEDULES`.
    lr_boundaries, lr_decay_rate: `piecewise` steps and factor per step.
    lr_decay_steps, lr_power: `cosine` / `polynomial` length and exponent.
    warmup_steps: linear warm-up from 0 over this many steps (0: none).
    accumulation_steps: micro-batches per update (k).
    lr_scaling: a rule of `scaling.RULES`.
    batch_scale: S; None: the gradient samples per update.
    scaling_warmup_updates: `linear` rule's warm-up length in updates.
    adascale_smoothing: AdaScale's theta in [0, 1) (None: its default).
    adascale_parts: a name of `choices.ADASCALE_PARTS`.
    cowclip_ratio, cowclip_min_norm: CowClip's r > 0 and zeta >= 0.
    precision: a name of `precision.PRECISIONS`.
    allreduce_compression: a name of `choices.COMPRESSIONS`.
    sparse_exchange: a name of `choices.SPARSE_EXCHANGES`.
  """
  optimizer: str = "momentum"
  learning_rate: float = 0.1
  lr_schedule: str = "constant"
  lr_boundaries: Tuple[int, ...] = ()
  lr_decay_rate: float = 0.1
  lr_decay_steps: int = 0
  lr_power: float = 1.0
  warmup_steps: int = 0
  accumulation_steps: int = 1
  lr_scaling: str = "identity"
  batch_scale: Optional[float] = None
  scaling_warmup_updates: int = 0
  adascale_smoothing: Optional[float] = None
  adascale_parts: str = "all"
  cowclip_ratio: Optional[float] = None
  cowclip_min_norm: Optional[float] = None
  optimizer_options: tuple = ()
  linear_optimizer: Optional[str] = None
  linear_optimizer_options: tuple = ()
  precision: str = "float32"
  allreduce_compression: str = "none"
  sparse_exchange: str = "auto"

  def __post_init__(self):
    optimizers.check_optimizer(self.optimizer)
    schedules.check(self)
    optimizers.check_options(self.optimizer, self.optimizer_options)
    if self.linear_optimizer is not None:
      optimizers.check_optimizer(self.linear_optimizer)
      optimizers.check_options(self.linear_optimizer,
                               self.linear_optimizer_options)
    elif self.linear_optimizer_options:
      raise errors.ConfigError(
          f"linear_optimizer_options={self.linear_optimizer_options!r} "
          "needs a linear_optimizer")
    precision_lib.check_precision(self.precision)
    choices.require("allreduce_compression", self.allreduce_compression,
                    choices.COMPRESSIONS)
    choices.require("sparse_exchange", self.sparse_exchange,
                    choices.SPARSE_EXCHANGES)
    if not isinstance(self.accumulation_steps, int) or self.accumulation_steps < 1:
      raise errors.ConfigError(
          f"accumulation_steps={self.accumulation_steps!r} must be an "
          "integer >= 1")
    scaling.check_rule(self.lr_scaling, self.batch_scale)
    if self.scaling_warmup_updates < 0:
      raise errors.ConfigError("scaling_warmup_updates="
                               f"{self.scaling_warmup_updates} must be >= 0")
    adascale.check_smoothing(self.adascale_smoothing, self.lr_scaling)
    adascale.check_parts(self.adascale_parts, self.lr_scaling)
    cowclip.check_settings(self.lr_scaling, self.cowclip_ratio,
                           self.cowclip_min_norm)

  def base_learning_rate(self, step):
    """The S = 1 rate at `step` (a float tensor), before `lr_scaling`."""
    return schedules.learning_rate(self, step)

  def samples_per_update(self, topology):
    """Gradient samples averaged by one update (S's default)."""
    return topology.replicas_per_update * self.accumulation_steps

  def resolved_scale(self, topology):
    """S: `batch_scale`, or its default on `topology`."""
    if self.batch_scale is not None:
      return float(self.batch_scale)
    return float(self.samples_per_update(topology))


@dataclasses.dataclass
class TrainOp:
  """The result of `build_train_op`.

  Attributes:
    train_op: one update (k micro-batches, reduction, apply).
    loss: the update's mean loss, for the EstimatorSpec.
    learning_rate: the applied rate; with `cowclip`, the dense variables'.
    adascale, loss_scale: their state, or None.
    compute_seconds: each worker's compute seconds, or None.
    input_wait_seconds: per worker where exchanged, else this worker's.
  """
  train_op: tf.Operation
  loss: tf.Tensor
  learning_rate: tf.Tensor
  adascale: Optional[adascale.AdaScale]
  loss_scale: Optional[precision_lib.LossScale] = None
  compute_seconds: Optional[tf.Tensor] = None
  input_wait_seconds: Optional[tf.Tensor] = None


def declare_estimator(training_config, topology):
  """Declares, for the graph being built, the Estimator that builds it.

  Keyed weakly by graph, which tf.distribute's replica threads share.

  Args:
    training_config: the `TrainingConfig` given to `make_estimator`, or None.
    topology: the Estimator's `Topology`.
  """
  graph_state.of(tf.compat.v1.get_default_graph()).declared = (
      training_config, topology)


def _declared():
  """What `declare_estimator` said for this graph or an outer one, or None."""
  graph = tf.compat.v1.get_default_graph()
  while graph is not None:
    declared = graph_state.of(graph).declared
    if declared is not None:
      return declared
    graph = getattr(graph, "outer_graph", None)
  return None


def _fields(config, names):
  return ", ".join(f"{name}={getattr(config, name)!r}" for name in names)


def estimator_settings(training_config=None, topology=None,
                       caller="build_train_op"):
  """(TrainingConfig, Topology): the given ones, else the Estimator's, else
  `TrainingConfig()` and one local process.

  Raises:
    ConfigError: a TrainingConfig or Topology other than the Estimator's.
  """
  declared = _declared()
  if declared is None:
    return (training_config or TrainingConfig(),
            topology or topology_lib.Topology())
  made_config, made_topology = declared
  if training_config is None:
    training_config = made_config or TrainingConfig()
  elif made_config is not None and training_config != made_config:
    differ = [field.name for field in dataclasses.fields(TrainingConfig)
              if getattr(training_config, field.name) !=
              getattr(made_config, field.name)]
    raise errors.ConfigError(
        f"{caller} was given a training_config with "
        f"{_fields(training_config, differ)} but the Estimator's "
        f"(make_estimator(training_config=...)) has "
        f"{_fields(made_config, differ)}: leave training_config out to "
        "take the Estimator's, or pass estimator.training_config")
  if topology is None:
    topology = made_topology
  else:
    topology.require_estimators(made_topology, f"{caller} was given")
  return training_config, topology


def build_train_op(loss_fn, features, labels, training_config=None,
                   topology=None):
  """The train op of one update, for any Estimator model_fn.

  Train through `make_estimator`, whose hooks keep Horovod ranks in step.

  Args:
    loss_fn: (features, labels) -> scalar mean loss; builds the network
      (under mixed precision, cast raw floating features yourself).
    features, labels: this replica's share of one update; labels may be None.
    training_config: `TrainingConfig`; None: the Estimator's.
    topology: this process's `Topology`; None: the Estimator's.

  Returns:
    `TrainOp`.

  Raises:
    ConfigError: a training_config or topology other than the Estimator's.
  """
  training_config, topology = estimator_settings(training_config, topology)
  built = _build(loss_fn, features, labels, training_config, topology)
  tf.compat.v1.summary.scalar("learning_rate", built.learning_rate)
  if built.adascale is not None:
    adascale.summaries(built.adascale)
  if built.compute_seconds is not None:
    stragglers.summaries(built.compute_seconds, topology.num_workers)
  if built.input_wait_seconds is not None:
    input_wait.summaries(built.input_wait_seconds, topology)
  return built


def _build(loss_fn, features, labels, config, topology):
  k = config.accumulation_steps
  use_adascale = config.lr_scaling == "adascale"
  use_cowclip = config.lr_scaling == cowclip.RULE
  per_part = use_adascale and config.adascale_parts != "all"
  in_sync = replicas_in_sync(topology)
  reducer = topology.backend.make_reducer(config.allreduce_compression,
                                          config.sparse_exchange)
  wait, features, labels = input_wait.measure(features, labels)
  start = None
  if stragglers.applies(topology):
    start, features = stragglers.start_timing(features)
  loss_scale = None
  if precision_lib.needs_loss_scaling(config.precision):
    with update.root_variable_scope():
      loss_scale = precision_lib.LossScale()
  with precision_lib.network_scope(config.precision):
    grads = accumulation.accumulate(
        loss_fn, features, labels, k, with_norms=use_adascale,
        loss_scale=loss_scale.value() if loss_scale else None,
        with_counts=use_cowclip,
        norm_groups=adascale.part_groups if per_part else None)
  dynamic.check_trainers(topology)
  if per_part:
    update.check_part_tables(grads.grads, grads.variables)
  global_step = tf.compat.v1.train.get_or_create_global_step()
  if not reducer.applies_updates:
    return _contribute(reducer, start, wait, grads, config, topology)
  reducer.expect(grads.variables, grads.loss)
  shared = None
  if start is not None:  # before the exchange, which may carry it
    shared = stragglers.exchange(start, grads.grads, grads.loss, reducer,
                                 topology)
  exchanged_wait = input_wait.exchange(wait, reducer, topology)
  scaled = update.reduce_and_scale(reducer, grads, config, topology)
  if scaled.table_rate is not None:
    optimizer = _tables_apart(config, scaled, grads)
  else:
    optimizer = parts.make_optimizer(config, scaled.rate, grads.grads,
                                     grads.variables)
  for each in parts.each_optimizer(optimizer):
    dynamic.reset_slots_on_admission(each)
  finished = list(scaled.writes)
  if scaled.mean is not None:
    finished.append(reducer.apply_reduced(optimizer, scaled.mean,
                                          grads.variables, global_step))
  else:
    finished.append(reducer.apply_mean(optimizer, grads.grads,
                                       grads.variables, global_step))
  compute_seconds = None
  if shared is not None:
    compute_seconds = shared()
    finished.append(compute_seconds)
  input_wait_seconds = exchanged_wait()
  finished.append(input_wait_seconds)
  if loss_scale is not None:
    finished.append(loss_scale.update(scaled.finite))
  finished.append(count_micro_batches(k))
  return TrainOp(train_op=tf.group(*finished), loss=grads.loss / in_sync,
                 learning_rate=scaled.rate, adascale=scaled.state,
                 loss_scale=loss_scale, compute_seconds=compute_seconds,
                 input_wait_seconds=input_wait_seconds)


def _tables_apart(config, scaled, grads):
  """One optimizer: tables at `scaled.table_rate`, other variables at
  `scaled.rate`."""
  tables = [isinstance(g, tf.IndexedSlices) for g in grads.grads]
  names = cowclip.table_names(grads.variables, tables)
  return parts.PerPartOptimizer(
      parts.make_optimizer(config, scaled.table_rate, scaled.mean,
                           grads.variables),
      parts.make_optimizer(config, scaled.rate, scaled.mean,
                           grads.variables),
      in_part=lambda variable: variable.name in names)


def _contribute(reducer, start, wait, grads, config, topology):
  """A synchronous ps worker's update (not the chief's): hand the gradients to
  the chief's apply and wait; reports the S = 1 rate."""
  if start is not None:
    stragglers.exchange(start, grads.grads, grads.loss, reducer, topology)
  own_wait = input_wait.exchange(wait, reducer, topology)
  waited = reducer.contribute(grads.grads, grads.variables,
                              update.norm_sums(config, grads), grads.loss)
  global_step = tf.compat.v1.train.get_or_create_global_step()
  counted = count_micro_batches(config.accumulation_steps)
  return TrainOp(train_op=tf.group(waited, counted), loss=grads.loss,
                 learning_rate=config.base_learning_rate(global_step),
                 adascale=None, input_wait_seconds=own_wait())


def replicas_in_sync(topology):
  """The replicas this update runs in sync, checked against the topology.

  Another backend's topology would reduce wrongly, silently. The count also
  divides the reported loss: Estimator sums the replicas' losses.
  """
  context = tf.distribute.get_replica_context()
  in_sync = context.num_replicas_in_sync if context else 1
  expected = topology.backend.replicas_in_sync(topology)
  if in_sync != expected:
    raise ValueError(
        f"topology (backend {topology.backend.name!r}, {expected} replica(s) in "
        f"sync) does not match the running job ({in_sync} replica(s) in "
        "sync); pass the topology of the run config the Estimator uses, "
        "build_run_config(...).topology")
  return in_sync


def count_micro_batches(k):
  """Adds an update's k micro-batches to `MICRO_BATCHES`.

  Counted at k = 1 too, so a checkpoint restarts with any accumulation. On
  ps it sits beside global_step: round-robin would place it after chief-only
  variables, on a task other workers may not agree on.
  """
  step_device = tf.compat.v1.train.get_or_create_global_step().device
  on_ps = "/job:ps" in step_device
  with update.root_variable_scope(), \
      (tf.device(step_device) if on_ps else contextlib.nullcontext()):
    counter = tf.compat.v1.get_variable(
        MICRO_BATCHES, shape=[], dtype=tf.int64, trainable=False,
        initializer=tf.compat.v1.zeros_initializer(),
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        use_resource=True)
  return counter.assign_add(k)

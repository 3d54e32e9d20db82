"""reduce -> scale: one update's mean gradient and rates, which the train op
and a canned estimator's optimizer each apply with their own optimizer."""
import dataclasses
from typing import Any, List, Optional

import tensorflow as tf

from estimator_scale import errors
from estimator_scale.embeddings import sharded
from estimator_scale.train_ops import adascale
from estimator_scale.train_ops import cowclip
from estimator_scale import gradients
from estimator_scale import precision as precision_lib
from estimator_scale.train_ops import scaling


@dataclasses.dataclass
class Scaled:
  """One update, reduced and scaled: `mean` is None where the apply reduces
  the gradients itself; `rate` is every variable's, or the dense ones'
  beside the tables' `table_rate`; `finite` (None: unchecked) says whether
  the update applies; `writes` run beside the apply."""
  mean: Optional[List[Any]]
  rate: tf.Tensor
  table_rate: Optional[tf.Tensor]
  finite: Optional[tf.Tensor]
  writes: List[Any]
  state: Optional[adascale.AdaScale]


def root_variable_scope():
  """The framework's own state keeps its names whatever scope the caller is in."""
  return tf.compat.v1.variable_scope(
      tf.compat.v1.VariableScope(tf.compat.v1.AUTO_REUSE, name=""),
      auxiliary_name_scope=False)


def reduce_and_scale(reducer, grads, config, topology, schedule=None,
                     reduce=False, state_scope=adascale.SCOPE):
  """The `Scaled` update of `grads` (`accumulation.Gradients`) under
  `config`, through `reducer` (told `expect` already); `schedule`: step ->
  the S = 1 rate (default: `config`'s); `reduce`: reduce even where the
  apply could; `state_scope`: AdaScale's state's (an optimizer among
  several keeps its own)."""
  schedule = schedule or config.base_learning_rate
  rule = config.lr_scaling
  global_step = tf.compat.v1.train.get_or_create_global_step()
  batch_scale = config.resolved_scale(topology)
  if topology is None or topology.is_chief:
    scaling.warn_beyond_studied(rule, batch_scale)
  skip_nonfinite = rule == "adascale" or precision_lib.needs_loss_scaling(
      config.precision)
  mean, finite, writes, state, table_rate = None, None, [], None, None
  if rule == "adascale":
    with root_variable_scope():
      state = adascale.AdaScale(batch_scale,
                                config.samples_per_update(topology),
                                config.adascale_smoothing, scope=state_scope)
    if config.adascale_parts != "all":
      mean, rate, finite, writes, table_rate = _adascale_parts(
          state, reducer, grads, config, schedule)
    else:
      mean, rate, finite, writes = _adascale_update(state, reducer, grads,
                                                    schedule)
    # tau advances beside the apply, after it was read for this rate.
    with tf.control_dependencies([rate]):
      writes.append(state.advance())
  else:  # CowClip's dense variables take the sqrt rule's rate
    rate = scaling.scaled_learning_rate(
        "sqrt" if rule == cowclip.RULE else rule, schedule, global_step,
        batch_scale, config.scaling_warmup_updates)
    if skip_nonfinite:
      mean, finite = _finite_mean(reducer, grads)
      rate = tf.where(finite, rate, 0.0)
    elif reduce or rule == cowclip.RULE:
      mean, _ = reducer.all_mean(grads.grads, [])
  if rule == cowclip.RULE:
    mean, table_rate = _clipped(mean, grads, config, topology, schedule,
                                finite)
  if skip_nonfinite:
    # A skipped update must not write inf * 0 = NaN into the weights.
    mean = [gradients.zero_unless(finite, g) for g in mean]
  return Scaled(mean=mean, rate=rate, table_rate=table_rate, finite=finite,
                writes=writes, state=state)


def _adascale_update(state, reducer, grads, schedule):
  """(mean, rate, finite, writes) of AdaScale; a sharded table's squared norm
  is summed in the exchange, as its mean is spread over the ranks."""
  if not any(sharded.is_sharded(v) for v in grads.variables):
    mean, (sum_sq,) = reducer.all_mean(grads.grads, [grads.sum_squared_norms])
    return (mean, *state.update(mean, sum_sq, schedule))
  _, own = sharded.mean_squared_norm(grads.grads, grads.variables)
  mean, (sum_sq, shards_sq) = reducer.all_mean(
      grads.grads, [grads.sum_squared_norms, own])
  rest, _ = sharded.mean_squared_norm(mean, grads.variables)
  return (mean, *state.update(rest, sum_sq, schedule,
                              extra_mean_squared_norm=shards_sq))


def _clipped(mean, grads, config, topology, schedule, finite):
  """(clipped mean, the tables' S = 1 rate, 0 where `finite` is false)."""
  tables = [isinstance(g, tf.IndexedSlices) for g in grads.grads]
  clipped = cowclip.clip_update(
      mean, grads.variables, tables, config.samples_per_update(topology),
      *cowclip.resolved(config.cowclip_ratio, config.cowclip_min_norm))
  table_rate = schedule(tf.compat.v1.train.get_or_create_global_step())
  if finite is not None:
    table_rate = tf.where(finite, table_rate, 0.0)
  return clipped, table_rate


def check_part_tables(grads, variables):
  """Raises ConfigError without tables or with a sharded one (its mean is
  spread over the ranks, outside the per-part norms)."""
  tables, _ = adascale.part_groups(grads, variables)
  shards = [v.op.name for v in variables if sharded.is_sharded(v)]
  if not tables or shards:
    raise errors.ConfigError(
        "adascale_parts='embeddings,dense' needs embedding tables, none "
        f"sharded (found {len(tables)} tables, sharded: {shards}); use "
        "tables that are not sharded, or adascale_parts='all'")


def _adascale_parts(state, reducer, grads, config, schedule):
  """(mean, dense rate, finite, writes, tables' rate) with a gain per part;
  the tables' state reads the dense state's tau, which alone advances."""
  with root_variable_scope():
    tables = adascale.AdaScale(
        state.scale, state.samples, config.adascale_smoothing,
        scope=adascale.TABLES_SCOPE, progress=state.progress)
  mean, (table_sq, dense_sq) = reducer.all_mean(grads.grads,
                                                norm_sums(config, grads))
  in_tables = [isinstance(g, tf.IndexedSlices) for g in grads.grads]
  table_rate, table_finite, writes = tables.update(
      [m for m, t in zip(mean, in_tables) if t], table_sq, schedule)
  rate, finite, dense_writes = state.update(
      [m for m, t in zip(mean, in_tables) if not t], dense_sq, schedule,
      also_finite=table_finite)
  return (mean, rate, finite, writes + dense_writes,
          tf.where(finite, table_rate, 0.0))


def norm_sums(config, grads):
  """AdaScale's summed squared norms for the exchange: one, or two per part."""
  if config.lr_scaling != "adascale":
    return []
  if config.adascale_parts == "all":
    return [grads.sum_squared_norms]
  return [tf.reshape(grads.sum_squared_norms[i], []) for i in range(2)]


def _finite_mean(reducer, grads):
  """(mean, whether every rank's part is finite); shard flags ride in the
  exchange, so all ranks skip together."""
  if not any(sharded.is_sharded(v) for v in grads.variables):
    mean, _ = reducer.all_mean(grads.grads, [])
    return mean, gradients.all_finite(mean)
  mean, (nonfinite,) = reducer.all_mean(
      grads.grads, [sharded.nonfinite_shards(grads.grads, grads.variables)])
  return mean, gradients.all_finite(mean) & tf.equal(nonfinite, 0.0)

"""CowClip's scaling rule: embeddings at the S = 1 rate, clipped per id.

Zheng et al., "CowClip: Reducing CTR Prediction Model Training Time from 12
hours to 10 minutes on 1 GPU", AAAI 2023 (Algorithm 1). An embedding row
is updated only by the examples that hold its id, so a larger batch does
not average its gradient over more examples the way it does a dense
layer's; the rule keeps the tables' rate, scales the dense variables' by
sqrt(S) and bounds each id's gradient by its own row's size:

    g_j <- g_j * min(1, clip_j / ||g_j||),
    clip_j = cnt_j * max(r * ||w_j||, zeta)

g_j is row j of the update's mean gradient, w_j the row before the update,
cnt_j the id's occurrences in the update's whole batch, r `cowclip_ratio`
and zeta `cowclip_min_norm`, the floor that lets new (zero or small) rows
move. This is the paper's Algorithm 1 as written; the authors' code puts r
outside the max and scales zeta by r * sqrt(dimension), which is the same
rule with another zeta.

cnt_j counts lookups of the id: for a one-id-per-example field that is the
examples holding it, as in the paper; an id an example holds twice counts
twice. The counts must be the whole update's, not a replica's, so the
clipping needs them after the reduction. They travel inside the gradient:
each lookup's gradient entry gets a last column of ones (`with_counts`),
which every sum of the pipeline (merging a row's entries, accumulation,
any backend's exchange) adds up with the row; after the reduction the
column holds cnt_j / n for n gradient samples, and `clip_update` takes it
off. So the clipping sees the counts and the mean of one process's update.

Tables are the variables whose gradient is sparse (IndexedSlices); those
made inside `linear_part()` (a wide part's one-column weights, which start
at zero) keep the S = 1 rate unclipped, as in the authors' code.
"""
import math

import tensorflow as tf

from estimator_scale import errors
from estimator_scale.embeddings import dynamic
from estimator_scale.embeddings import sharded
from estimator_scale.train_ops import parts

RULE = "cowclip"
"""The `lr_scaling` value of this rule."""

DEFAULT_RATIO = 1.0
"""r when `cowclip_ratio` is unset (the paper's value)."""

DEFAULT_MIN_NORM = 1e-5
"""zeta when `cowclip_min_norm` is unset (the paper's on Criteo)."""

_SETTINGS = (("cowclip_ratio", "> 0", lambda value: value > 0),
             ("cowclip_min_norm", ">= 0", lambda value: value >= 0))


def check_settings(lr_scaling, ratio, min_norm):
  """Raises ConfigError for a bad r or zeta, or either set with another rule.

  None is the default (`DEFAULT_RATIO`, `DEFAULT_MIN_NORM`).
  """
  for (name, valid, holds), value in zip(_SETTINGS, (ratio, min_norm)):
    if value is None:
      continue
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or
        not math.isfinite(value) or not holds(value)):
      raise errors.ConfigError(
          f"{name}={value!r} must be a finite number {valid}")
    if lr_scaling != RULE:
      raise errors.ConfigError(f"{name}={value} needs lr_scaling='{RULE}'")


def resolved(ratio, min_norm):
  """(r, zeta): the settings, or their defaults where unset."""
  return (DEFAULT_RATIO if ratio is None else float(ratio),
          DEFAULT_MIN_NORM if min_norm is None else float(min_norm))


def with_counts(grad, variable):
  """An embedding's gradient with a column of ones after its values.

  Call it on each micro-batch's gradient as `tf.gradients` gives it, one
  entry per lookup, before accumulation; a dense gradient (or None) is
  returned as it is.

  Raises:
    ConfigError: a sparse gradient of a table whose rows are not vectors.
  """
  if not isinstance(grad, tf.IndexedSlices):
    return grad
  if grad.values.shape.rank != 2:
    raise errors.ConfigError(
        f"lr_scaling='{RULE}' clips each row of a table of vectors; "
        f"{variable.name} has rows of shape {grad.values.shape[1:]}")
  values = tf.concat([grad.values, tf.ones_like(grad.values[:, :1])], 1)
  return tf.IndexedSlices(values, grad.indices,
                          _columns(grad.dense_shape, 1))


def _strip(values):
  """(the gradient's own columns, the counts column)."""
  return values[:, :-1], values[:, -1]


def clip_factors(values, rows, counts, ratio, min_norm):
  """Per row, the factor that scales it to at most cnt * max(r ||w||, zeta).

  Args:
    values: the update's gradient rows, one per id, [n, d].
    rows: the table's rows they update, as before the update, [n, d].
    counts: the ids' occurrences in the update, [n].
    ratio, min_norm: r and zeta.
  """
  bound = counts * tf.maximum(ratio * tf.norm(rows, axis=1), min_norm)
  norm = tf.norm(values, axis=1)
  return tf.where(norm > bound, tf.math.divide_no_nan(bound, norm), 1.0)


def _clip_dense(grad, variable, samples, ratio, min_norm):
  """A table's gradient the exchange made dense: every row, counts beside."""
  values, counts = _strip(grad)
  factors = clip_factors(values, tf.convert_to_tensor(variable),
                         tf.round(counts * samples), ratio, min_norm)
  return values * factors[:, None]


def _clip_sparse(grad, variable, samples, ratio, min_norm):
  """A table's sparse gradient, its entries of one row clipped as the row.

  The bound is the row's whole (its entries summed, its lookups counted),
  but the entries stay as they came: their number is the one the exchange
  fixed, which tf.distribute's replica-context apply needs from step to
  step (see backends/reducers.py).
  """
  ids, positions = tf.unique(grad.indices)
  merged = tf.math.unsorted_segment_sum(grad.values, positions,
                                        tf.shape(ids)[0])
  values, counts = _strip(merged)
  factors = clip_factors(values, tf.gather(variable, ids),
                         tf.round(counts * samples), ratio, min_norm)
  own, _ = _strip(grad.values)
  return tf.IndexedSlices(own * tf.gather(factors, positions)[:, None],
                          grad.indices, _columns(grad.dense_shape, -1))


def _columns(dense_shape, more):
  """A table gradient's dense shape with `more` columns (the counts')."""
  shape = tf.cast(dense_shape, tf.int64)
  return tf.concat([shape[:1], shape[1:] + more], 0)


def _unclipped(grad):
  """A table's gradient without its counts, not clipped (a linear part's)."""
  if not isinstance(grad, tf.IndexedSlices):
    return _strip(grad)[0]
  return tf.IndexedSlices(_strip(grad.values)[0], grad.indices,
                          _columns(grad.dense_shape, -1))


def clip_update(grads, variables, tables, samples, ratio, min_norm):
  """The update's reduced gradients with every table's rows clipped and
  the counts taken off.

  Args:
    grads: the reduced mean gradients, per variable (None kept); a table's
      carries its counts (`with_counts`), each divided by `samples`, and
      is sparse, or dense where the exchange made it so.
    variables: their variables.
    tables: per gradient, whether it carries counts.
    samples: the gradient samples the reduction averaged (n).
    ratio, min_norm: r and zeta.
  """
  clipped = []
  for grad, variable, table in zip(grads, variables, tables):
    if table and grad is not None:
      if parts.is_linear(variable):
        grad = _unclipped(grad)
      else:
        clip = (_clip_sparse if isinstance(grad, tf.IndexedSlices) else
                _clip_dense)
        grad = clip(grad, variable, float(samples), ratio, min_norm)
    clipped.append(grad)
  return clipped


def table_names(variables, tables):
  """The names an optimizer's apply may see of the tables' variables: a
  mirrored variable's replicas each have their own."""
  return {part.name for variable, table in zip(variables, tables) if table
          for part in getattr(variable, "values", None) or (variable,)}


def check_tables(variables):
  """Raises ConfigError for a table whose update path the rule does not
  take: a sharded table's rows are reduced on their owner rank and a
  dynamic table admits and resets rows in its own update, so neither
  carries the counts to the clipping."""
  for variable in variables:
    kind = ("sharded" if sharded.is_sharded(variable) else
            "dynamic" if dynamic.table_of(variable) is not None else None)
    if kind is not None:
      raise errors.ConfigError(
          f"{kind} table {variable.op.name!r}: lr_scaling='{RULE}' "
          "clips hashed and partitioned tables only; use one of those or "
          "another lr_scaling")

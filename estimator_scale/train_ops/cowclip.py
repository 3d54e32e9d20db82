"""CowClip's scaling rule: embeddings at the S = 1 rate, clipped per id.

Zheng et al., AAAI 2023 (Algorithm 1). A larger batch does not average an
embedding row's gradient as it does a dense layer's, so tables keep the
S = 1 rate, dense variables take sqrt(S), and each id's gradient is
clipped to cnt_j * max(r ||w_j||, zeta) (`cowclip_ratio`,
`cowclip_min_norm`). The counts must be the whole update's, so they ride
in the gradient as a last column (`with_counts`, from the all-to-all for
sharded rows) that every sum adds; `clip_update` takes it off.
`linear_part()` tables stay unclipped.
"""
import math

import tensorflow as tf

from estimator_scale import errors
from estimator_scale import gradients
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
  """Raises ConfigError for a bad r or zeta, or either set with another rule."""
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
  """An embedding's gradient with its rows' counts after its values.

  Call per micro-batch before accumulation; dense (or None) passes as is.

  Raises:
    ConfigError: a sparse gradient of a table whose rows are not vectors.
  """
  if not isinstance(grad, tf.IndexedSlices):
    return grad
  if grad.values.shape.rank != 2:
    raise errors.ConfigError(
        f"lr_scaling='{RULE}' clips each row of a table of vectors; "
        f"{variable.name} has rows of shape {grad.values.shape[1:]}")
  counts = _occurrences(grad.indices)
  if counts is None:
    counts = tf.ones_like(grad.values[:, 0])
  values = tf.concat([grad.values, tf.cast(counts, grad.values.dtype)[:, None]],
                     1)
  return tf.IndexedSlices(values, grad.indices,
                          _columns(grad.dense_shape, 1))


_SAME_ROWS = ("Identity", "Reshape", "Cast")
_UNIQUE = ("Unique", "UniqueV2")


def _occurrences(indices):
  """Per gradient row, the lookups it sums (None: one each); feature columns
  look up distinct ids, whose Unique op's positions count them."""
  source = _through(indices)
  exchanged = sharded.counts_of(source)  # all ranks' lookups, at the owner
  if exchanged is not None:
    return exchanged
  if source.op.type in _UNIQUE and source.value_index == 0:
    return _counts(source.op)
  if source.op.type == "DynamicPartition":  # a partitioned table's part
    unique = _unique_above(source.op.inputs[0])
    if unique is not None:
      return tf.dynamic_partition(
          _counts(unique), source.op.inputs[1],
          source.op.get_attr("num_partitions"))[source.value_index]
  return None


def _through(tensor):
  """The tensor `tensor` copies or reshapes, row for row."""
  while tensor.op.type in _SAME_ROWS:
    tensor = tensor.op.inputs[0]
  return tensor


def _unique_above(tensor, depth=12):
  """The Unique op `depth` ops above `tensor` (a partition's rows), or None."""
  ops = {tensor.op.name: tensor.op}
  for _ in range(depth):
    for op in ops.values():
      if op.type in _UNIQUE:
        return op
    ops = {x.op.name: x.op for op in ops.values() for x in op.inputs}
  return None


def _counts(unique):
  """How many times each distinct id of a Unique op was looked up."""
  ids, positions = unique.outputs
  return sharded.occurrences(positions, tf.size(ids))


def scale_values(grad, factor):
  """`grad` x `factor`, a table's counts column left as it is."""
  if not isinstance(grad, tf.IndexedSlices):
    return gradients.scale(grad, factor)
  values, counts = _strip(grad.values)
  return tf.IndexedSlices(tf.concat([values * factor, counts[:, None]], 1),
                          grad.indices, grad.dense_shape)


def _strip(values):
  """(the gradient's own columns, the counts column)."""
  return values[:, :-1], values[:, -1]


def clip_factors(values, rows, counts, ratio, min_norm):
  """Per row, the factor that scales it to at most cnt * max(r ||w||, zeta).

  Args:
    values, rows: gradient rows and table rows before the update, [n, d].
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
  """A table's sparse gradient, entries clipped per row but not merged: the
  replica-context apply needs the count the exchange fixed."""
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
  """Reduced gradients with every table's rows clipped and counts taken off.

  Args:
    grads: the reduced mean gradients; a table's carries counts / `samples`.
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
  """Names an apply may see of the tables' variables (mirrored replicas too)."""
  return {part.name for variable, table in zip(variables, tables) if table
          for part in getattr(variable, "values", None) or (variable,)}

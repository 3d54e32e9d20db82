"""Canned estimators, k micro-batches per update: the model_fn runs inside the
accumulation loop (too late to split at `get_updates`), optimizers record."""
import functools

import tensorflow as tf

from estimator_scale import canned
from estimator_scale import errors
from estimator_scale.train_ops import accumulation
from estimator_scale.train_ops import cowclip
from estimator_scale.train_ops import pipeline


def with_accumulation(tf_estimator):
  """`tf_estimator.model_fn`, trained k micro-batches per update.

  Raises:
    ConfigError: the canned optimizers differ in accumulation_steps.
  """
  model_fn = tf_estimator.model_fn
  found = [value for value in _closed_over(tf_estimator._model_fn)  # pylint: disable=protected-access
           if isinstance(value, canned.CannedOptimizer)]
  if not found:
    return model_fn
  steps = sorted({optimizer.plan.config.accumulation_steps
                  for optimizer in found})
  if len(steps) > 1:
    raise errors.ConfigError(
        f"the estimator's canned optimizers have accumulation_steps "
        f"{' and '.join(map(str, steps))}; give every canned_optimizer of "
        "one estimator the same accumulation_steps")
  k = steps[0]
  with_norms = any(o.plan.config.lr_scaling == "adascale" for o in found)
  clipped = {o.plan.config.lr_scaling == cowclip.RULE for o in found}
  if k > 1 and len(clipped) > 1:  # one accumulation loop adds counts or not
    raise errors.ConfigError(
        f"the estimator's canned optimizers mix lr_scaling='{cowclip.RULE}' "
        "and other rules at accumulation_steps > 1; give every "
        f"canned_optimizer of one estimator lr_scaling='{cowclip.RULE}' or "
        "none of them")
  with_counts = clipped == {True}

  def model_fn_k(features, labels, mode, config):
    if mode != tf.estimator.ModeKeys.TRAIN:
      return model_fn(features, labels, mode, config)
    if k == 1:
      spec = model_fn(features, labels, mode, config)
      return spec._replace(train_op=tf.group(
          spec.train_op, pipeline.count_micro_batches(1)))
    return _accumulated_spec(model_fn, features, labels, config, k,
                             with_norms, with_counts)
  return model_fn_k


def _closed_over(function):
  """The values a function (or a functools.partial of one) holds."""
  if isinstance(function, functools.partial):
    yield from function.args
    yield from function.keywords.values()
    function = function.func
  for cell in getattr(function, "__closure__", None) or ():
    try:
      yield cell.cell_contents
    except ValueError:  # a cell not yet filled
      continue


class _Recorder:
  """What the canned optimizers were given while traced inside the loop."""

  def __init__(self):
    self.parts = []  # (optimizer, its variables, the name scope it had)
    self.loss = None

  def add(self, optimizer, loss, params):
    if self.loss is not None and loss is not self.loss:
      raise errors.UsageError(
          "the model_fn's canned optimizers were given different losses; "
          "accumulation_steps > 1 needs one loss for all of them")
    self.loss = loss
    scope = tf.compat.v1.get_default_graph().get_name_scope()
    self.parts.append((optimizer, params, scope))

  def groups(self, *_):
    return [params for _, params, _ in self.parts]

  def trace(self, model_fn, features, labels, config):
    """The loss the optimizers were given, with the model_fn traced once."""
    summaries = tf.compat.v1.get_collection_ref(
        tf.compat.v1.GraphKeys.SUMMARIES)
    first = len(summaries)
    with canned.recording(self):
      spec = model_fn(features, labels, tf.estimator.ModeKeys.TRAIN, config)
    # The head's summaries are tensors of the loop; Estimator writes the
    # update's loss itself.
    del summaries[first:]
    if self.loss is None:
      raise errors.UsageError(
          "accumulation_steps > 1: the model_fn called no canned optimizer's "
          "get_updates in TRAIN mode")
    self.hooks = (spec.training_hooks, spec.training_chief_hooks)
    return self.loss


def _accumulated_spec(model_fn, features, labels, config, k, with_norms,
                      with_counts):
  """TRAIN mode's EstimatorSpec of k micro-batches per update."""
  recorder = _Recorder()
  grads = accumulation.accumulate(
      lambda f, l: recorder.trace(model_fn, f, l, config), features, labels,
      k, with_norms=with_norms, with_counts=with_counts,
      norm_groups=recorder.groups if with_norms else None)
  by_variable = {v.ref(): g for g, v in zip(grads.grads, grads.variables)}
  updates = [pipeline.count_micro_batches(k)]
  for index, (optimizer, params, scope) in enumerate(recorder.parts):
    sum_squared = (None if grads.sum_squared_norms is None else
                   grads.sum_squared_norms[index])
    # Where get_updates was called, so its slots keep their names at any k.
    with tf.compat.v1.name_scope(scope + "/" if scope else None):
      updates.append(optimizer.apply_accumulated(
          [by_variable.get(p.ref()) for p in params], params, sum_squared,
          grads.loss))
  hooks, chief_hooks = recorder.hooks
  return tf.estimator.EstimatorSpec(
      tf.estimator.ModeKeys.TRAIN, loss=grads.loss,
      train_op=tf.group(*updates), training_hooks=hooks,
      training_chief_hooks=chief_hooks)

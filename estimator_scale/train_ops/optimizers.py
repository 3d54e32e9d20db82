"""Optimizer registry: names the CLI accepts, mapped to v1 graph optimizers.

Graph mode needs `tf.compat.v1.train` optimizers, so AdamW, LARS and LAMB
are built on v1 Momentum and Adam; they see the reduced gradient, so one
implementation serves every backend.
"""
import difflib
import inspect
import re

import tensorflow as tf

from estimator_scale import choices
from estimator_scale import errors
from estimator_scale.embeddings import shard_updates

_V1 = tf.compat.v1.train


class AdamWOptimizer(_V1.AdamOptimizer):
  """Adam with weight decay decoupled from the gradient (Loshchilov & Hutter):
  `lr * weight_decay * var` before the step, never in the moments."""

  def __init__(self, learning_rate, weight_decay=0.01, **kwargs):
    super().__init__(learning_rate, name=kwargs.pop("name", "AdamW"), **kwargs)
    self._weight_decay = weight_decay

  def _decay(self, var):
    lr = tf.cast(self._lr_t, var.dtype.base_dtype)
    return var.assign_sub(lr * self._weight_decay * var,
                          use_locking=self._use_locking)

  def _resource_apply_dense(self, grad, var):
    """See base class."""
    with tf.control_dependencies([self._decay(var)]):
      return super()._resource_apply_dense(grad, var)

  def _resource_apply_sparse(self, grad, var, indices):
    """See base class."""
    with tf.control_dependencies([self._decay(var)]):
      return super()._resource_apply_sparse(grad, var, indices)

  def _apply_dense(self, grad, var):
    """See base class."""
    with tf.control_dependencies([self._decay(var)]):
      return super()._apply_dense(grad, var)


class LazyAdamOptimizer(_V1.AdamOptimizer):
  """Adam moving only looked-up rows and moments (v1 Adam moves every row)."""

  updates_looked_up_rows_only = True  # see deltas.ROWS_ONLY

  def __init__(self, learning_rate, **kwargs):
    super().__init__(learning_rate, name=kwargs.pop("name", "LazyAdam"),
                     **kwargs)

  def _resource_apply_sparse(self, grad, var, indices):
    """See base class; `indices` are distinct (duplicates summed first)."""
    return self._lazy_update(grad, var, indices)

  def _apply_sparse(self, grad, var):
    """See base class."""
    return self._lazy_update(grad.values, var, grad.indices)

  def _lazy_update(self, grad, var, indices):
    rate, beta1, beta2, epsilon = shard_updates.adam_terms(
        self, var.dtype.base_dtype)
    m, v = self.get_slot(var, "m"), self.get_slot(var, "v")
    m_rows = beta1 * tf.gather(m, indices) + (1 - beta1) * grad
    v_rows = beta2 * tf.gather(v, indices) + (1 - beta2) * tf.square(grad)
    step = rate * m_rows / (tf.sqrt(v_rows) + epsilon)
    return tf.group(
        tf.compat.v1.scatter_update(m, indices, m_rows,
                                    use_locking=self._use_locking),
        tf.compat.v1.scatter_update(v, indices, v_rows,
                                    use_locking=self._use_locking),
        tf.compat.v1.scatter_sub(var, indices, step,
                                 use_locking=self._use_locking))


# Biases and normalisation parameters (v1/Keras batch_normalization, BERT's
# LayerNorm, ResNet's gamma/beta) have no scale worth matching, and decaying
# them only hurts (You et al. 2017; 2019), so layer-wise adaptation and weight
# decay leave them out unless the `exclude` option says otherwise.
DEFAULT_EXCLUDE = ("bias", "batch_norm", "batch_normalization", "BatchNorm",
                   "layer_norm", "layer_normalization", "LayerNorm", "beta",
                   "gamma")


_VALID = {"in [0, 1)": lambda x: 0.0 <= x < 1.0, ">= 0": lambda x: x >= 0.0,
          "> 0": lambda x: x > 0.0, "<= 0": lambda x: x <= 0.0}


def _check(optimizer, name, value, valid):
  """Raises ConfigError naming the option unless `value` is `valid`."""
  if not _VALID[valid](value):
    raise errors.ConfigError(f"optimizer={optimizer!r}: option {name} must "
                             f"be {valid}, got {value!r}")


def _compile_exclusions(optimizer, exclude):
  """The `exclude` regexes, compiled, or a ConfigError naming the bad one."""
  if isinstance(exclude, str):
    raise errors.ConfigError(
        f"optimizer={optimizer!r}: option exclude must be a sequence of "
        f"regexes (a tuple of strings), not the single string {exclude!r}")
  compiled = []
  for pattern in exclude:
    try:
      compiled.append(re.compile(pattern))
    except (re.error, TypeError) as error:
      raise errors.ConfigError(
          f"optimizer={optimizer!r}: option exclude holds {pattern!r}, which "
          f"is not a valid regex ({error})") from None
  return compiled


def _trust_ratio(w_norm, other_norm, ratio):
  """`ratio`, or 1 when a norm is 0 (0 would freeze a zero-initialised layer);
  compute `ratio` with divide_no_nan."""
  defined = (w_norm > 0.0) & (other_norm > 0.0)
  return tf.where(defined, ratio, tf.ones_like(ratio))


class _LayerwiseMixin:
  """What LARS and LAMB share: exclusions, and `_update(grad, var)` for any
  gradient; sparse ones are made dense (the trust ratio needs the norm)."""

  updates_looked_up_rows_only = False  # see deltas.ROWS_ONLY

  def _init_exclusions(self, optimizer, exclude):
    self._exclude = _compile_exclusions(
        optimizer, DEFAULT_EXCLUDE if exclude is None else exclude)

  def _adapts(self, var):
    """Whether `var` gets weight decay and a trust ratio (not excluded)."""
    name = var.op.name
    return not any(pattern.search(name) for pattern in self._exclude)

  def _apply_dense(self, grad, var):
    """See base class."""
    return self._update(grad, var)

  def _resource_apply_dense(self, grad, var):
    """See base class."""
    return self._update(grad, var)

  def _apply_sparse(self, grad, var):
    """See base class."""
    return self._resource_apply_sparse(grad.values, var, grad.indices)

  def _resource_apply_sparse(self, grad, var, indices):
    """See base class."""
    dense = tf.math.unsorted_segment_sum(grad, indices, var.shape[0])
    return self._update(dense, var)


class LARSOptimizer(_LayerwiseMixin, _V1.MomentumOptimizer):
  """LARS (You, Gitman and Ginsburg 2017), as in the ResNet large-batch recipe.

    ratio = eta ||w|| / (||g|| + wd ||w||)     (1 if ||w|| or ||g|| is 0)
    v <- m v + lr ratio (g + wd w);   w <- w - v

  Excluded variables take v <- m v + lr g.

  Args:
    learning_rate: float or scalar tensor.
    momentum: m in [0, 1).
    weight_decay: wd >= 0 (an L2 term added to the gradient).
    trust_coefficient: eta > 0.
    exclude: regexes of variables without decay or ratio (None:
      `DEFAULT_EXCLUDE`).
    name: prefix of the slot variables.
  """

  def __init__(self, learning_rate, momentum=0.9, weight_decay=1e-4,
               trust_coefficient=0.001, exclude=None, name="LARS"):
    _check("lars", "momentum", momentum, "in [0, 1)")
    _check("lars", "weight_decay", weight_decay, ">= 0")
    _check("lars", "trust_coefficient", trust_coefficient, "> 0")
    super().__init__(learning_rate, momentum, name=name)
    self._weight_decay = weight_decay
    self._trust_coefficient = trust_coefficient
    self._init_exclusions("lars", exclude)

  def _update(self, grad, var):
    dtype = var.dtype.base_dtype
    lr = tf.cast(self._learning_rate_tensor, dtype)
    momentum = tf.cast(self._momentum_tensor, dtype)
    velocity = self.get_slot(var, "momentum")
    weights = var.read_value()
    if self._adapts(var):
      decay = self._weight_decay
      w_norm, g_norm = tf.norm(weights), tf.norm(grad)
      ratio = _trust_ratio(w_norm, g_norm, self._trust_coefficient *
                           tf.math.divide_no_nan(w_norm,
                                                 g_norm + decay * w_norm))
      step = lr * ratio * (grad + decay * weights)
    else:
      step = lr * grad
    new_velocity = momentum * velocity.read_value() + step
    return tf.group(
        velocity.assign(new_velocity, use_locking=self._use_locking,
                        read_value=False),
        var.assign(weights - new_velocity, use_locking=self._use_locking,
                   read_value=False))


class LAMBOptimizer(_LayerwiseMixin, _V1.AdamOptimizer):
  """LAMB (You et al. 2019), as in NVIDIA's BERT recipe.

    u = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd w
    w <- w - lr ratio u,   ratio = ||w|| / ||u||   (1 if either is 0)

  Args:
    learning_rate: float or scalar tensor.
    beta1, beta2: moment decays in [0, 1).
    epsilon: > 0, added to the root of the second moment.
    weight_decay: wd >= 0, decoupled.
    exclude: as for `LARSOptimizer` (plain Adam for those).
    name: prefix of the slot variables.
  """

  def __init__(self, learning_rate, beta1=0.9, beta2=0.999, epsilon=1e-6,
               weight_decay=0.01, exclude=None, name="LAMB"):
    _check("lamb", "beta1", beta1, "in [0, 1)")
    _check("lamb", "beta2", beta2, "in [0, 1)")
    _check("lamb", "epsilon", epsilon, "> 0")
    _check("lamb", "weight_decay", weight_decay, ">= 0")
    super().__init__(learning_rate, beta1=beta1, beta2=beta2, epsilon=epsilon,
                     name=name)
    self._weight_decay = weight_decay
    self._init_exclusions("lamb", exclude)

  def _update(self, grad, var):
    dtype = var.dtype.base_dtype
    lr, beta1, beta2, epsilon = [tf.cast(t, dtype) for t in (
        self._lr_t, self._beta1_t, self._beta2_t, self._epsilon_t)]
    beta1_power, beta2_power = [tf.cast(p, dtype)
                                for p in self._get_beta_accumulators()]
    first, second = self.get_slot(var, "m"), self.get_slot(var, "v")
    new_first = beta1 * first.read_value() + (1.0 - beta1) * grad
    new_second = beta2 * second.read_value() + (1.0 - beta2) * tf.square(grad)
    weights = var.read_value()
    adam = (new_first / (1.0 - beta1_power)) / (
        tf.sqrt(new_second / (1.0 - beta2_power)) + epsilon)
    if self._adapts(var):
      step = adam + self._weight_decay * weights
      w_norm, step_norm = tf.norm(weights), tf.norm(step)
      step *= _trust_ratio(w_norm, step_norm,
                           tf.math.divide_no_nan(w_norm, step_norm))
    else:
      step = adam
    locking = self._use_locking
    return tf.group(
        first.assign(new_first, use_locking=locking, read_value=False),
        second.assign(new_second, use_locking=locking, read_value=False),
        var.assign(weights - lr * step, use_locking=locking,
                   read_value=False))


def _sgd(lr):
  return _V1.GradientDescentOptimizer(lr)


def _momentum(lr, momentum=0.9, nesterov=False):
  return _V1.MomentumOptimizer(lr, momentum=momentum, use_nesterov=nesterov)


def _adam(lr, beta1=0.9, beta2=0.999, epsilon=1e-8):
  """v1 Adam, updating a table's slices a block of rows at a time."""
  optimizer = _V1.AdamOptimizer(lr, beta1=beta1, beta2=beta2, epsilon=epsilon)
  shard_updates.update_in_blocks(optimizer)
  return optimizer


def _lazy_adam(lr, beta1=0.9, beta2=0.999, epsilon=1e-8):
  return LazyAdamOptimizer(lr, beta1=beta1, beta2=beta2, epsilon=epsilon)


def _adamw(lr, beta1=0.9, beta2=0.999, epsilon=1e-8, weight_decay=0.01):
  return AdamWOptimizer(lr, weight_decay=weight_decay, beta1=beta1,
                        beta2=beta2, epsilon=epsilon)


def _lars(lr, momentum=0.9, weight_decay=1e-4, trust_coefficient=0.001,
          exclude=None):
  return LARSOptimizer(lr, momentum=momentum, weight_decay=weight_decay,
                       trust_coefficient=trust_coefficient, exclude=exclude)


def _lamb(lr, beta1=0.9, beta2=0.999, epsilon=1e-6, weight_decay=0.01,
          exclude=None):
  return LAMBOptimizer(lr, beta1=beta1, beta2=beta2, epsilon=epsilon,
                       weight_decay=weight_decay, exclude=exclude)


class _FtrlOptimizer(_V1.FtrlOptimizer):
  """FTRL whose accumulator starts from a constant initializer: TF's
  `ones * value` folds into a table-sized constant."""

  def _create_slots(self, var_list):
    for v in var_list:
      dtype = v.dtype.base_dtype
      self._get_or_make_slot_with_initializer(
          v, tf.compat.v1.constant_initializer(
              self._initial_accumulator_value, dtype=dtype),
          v.shape, dtype, "accum", self._accum_name or self._name)
      self._zeros_slot(v, "linear", self._linear_name or self._name)


def _adagrad(lr, initial_accumulator_value=0.1):
  """Adagrad: accum += g^2; w -= lr g / sqrt(accum), row by row when sparse."""
  _check("adagrad", "initial_accumulator_value", initial_accumulator_value,
         "> 0")
  return _V1.AdagradOptimizer(
      lr, initial_accumulator_value=initial_accumulator_value)


def _ftrl(lr, learning_rate_power=-0.5, initial_accumulator_value=0.1,
          l1=0.0, l2=0.0, l2_shrinkage=0.0, beta=0.0):
  """FTRL-Proximal (McMahan et al. 2013), the wide part's usual optimizer."""
  _check("ftrl", "learning_rate_power", learning_rate_power, "<= 0")
  for name, value in (("initial_accumulator_value", initial_accumulator_value),
                      ("l1", l1), ("l2", l2), ("l2_shrinkage", l2_shrinkage),
                      ("beta", beta)):
    _check("ftrl", name, value, ">= 0")
  return _FtrlOptimizer(
      lr, learning_rate_power=learning_rate_power,
      initial_accumulator_value=initial_accumulator_value,
      l1_regularization_strength=l1, l2_regularization_strength=l2,
      l2_shrinkage_regularization_strength=l2_shrinkage, beta=beta)


OPTIMIZERS = {"sgd": _sgd, "momentum": _momentum, "adam": _adam,
              "lazy_adam": _lazy_adam, "adamw": _adamw, "lars": _lars,
              "lamb": _lamb, "adagrad": _adagrad, "ftrl": _ftrl}
"""Each optimizer's factory; its keyword arguments are the options it takes."""


def check_optimizer(name):
  """Raises ConfigError naming the valid optimizers when `name` is not one."""
  choices.require("optimizer", name, sorted(OPTIMIZERS))


def valid_options(name):
  """The options optimizer `name` takes, read off its factory's signature."""
  check_optimizer(name)
  parameters = list(inspect.signature(OPTIMIZERS[name]).parameters)
  return tuple(parameters[1:])  # the first is the learning rate


def check_options(name, options):
  """Raises ConfigError unless every key of `options` is an option of `name`.

  Args:
    name: a key of `OPTIMIZERS`.
    options: {option: value} or (option, value) pairs.

  Raises:
    ConfigError: unknown optimizer, options not pairs, or an unknown option.
  """
  valid = valid_options(name)
  try:
    keys = list(dict(options))
  except (TypeError, ValueError):
    raise errors.ConfigError(
        f"optimizer_options={options!r} must be (name, value) pairs, e.g. "
        "((\"momentum\", 0.9),)") from None
  for key in keys:
    if key not in valid:
      close = difflib.get_close_matches(str(key), valid, n=1)
      hint = f" (did you mean {close[0]!r}?)" if close else ""
      raise errors.ConfigError(
          f"optimizer_options: {key!r} is not an option of "
          f"optimizer={name!r}{hint}; valid: "
          f"{', '.join(valid) if valid else 'none'}")


def make_optimizer(name, learning_rate, **options):
  """Builds the named optimizer around a (possibly tensor) learning rate.

  Args:
    name: a key of `OPTIMIZERS`.
    learning_rate: float or scalar tensor, already scaled and scheduled.
    **options: settings of this optimizer (`valid_options(name)`).

  Returns:
    A `tf.compat.v1.train.Optimizer`.

  Raises:
    ConfigError: an option this optimizer does not take.
  """
  check_options(name, options)
  return OPTIMIZERS[name](learning_rate, **options)

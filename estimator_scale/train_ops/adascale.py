"""AdaScale (Johnson et al., ICML 2020): gain ratio, scale-invariant progress.

n: gradient samples g_i per update; S: total batch over the S = 1 batch
(S = n unless batch_scale is set). Gain r = (sigma^2 + mu^2) /
(sigma^2 / S + mu^2), estimated with v = (sum ||g_i||^2 - n ||g||^2) /
(n - 1), sigma^2 = v S / n (a sample averages total/n examples) and
mu^2 = ||g||^2 - sigma^2 / S; then clipped (sigma^2 >= 1e-6, mu^2 >= 0)
and smoothed by a bias-corrected moving average. lr = r x
schedule(floor(tau)), then tau += r, as fairscale's AdaScale does.

The state under `adascale/` is at the S = 1 batch, so it survives a
restart with another n or S if total/S is unchanged (fix it with
batch_scale).
"""
import tensorflow as tf

from estimator_scale import choices
from estimator_scale import errors
from estimator_scale import gradients

SCOPE = "adascale"
GAIN = f"{SCOPE}/gain"
PROGRESS = f"{SCOPE}/progress"
SCALE = f"{SCOPE}/scale"
GRAD_VAR_AVG = f"{SCOPE}/grad_var_avg"
GRAD_SQR_AVG = f"{SCOPE}/grad_sqr_avg"
EMA_WEIGHT = f"{SCOPE}/ema_weight"
NONFINITE_UPDATES = f"{SCOPE}/nonfinite_updates"
MIN_VARIANCE = 1e-6
TABLES_SCOPE = f"{SCOPE}/embeddings"
"""Where the embedding tables' state lives with `adascale_parts`; the
dense variables' is the job's public state under `SCOPE`."""


def _variable(full_name, dtype=tf.float32, initial=0.0):
  """A scalar state variable `full_name` under `SCOPE`, in the state's scope."""
  return tf.compat.v1.get_variable(
      full_name[len(SCOPE) + 1:], shape=[], dtype=dtype, trainable=False,
      initializer=tf.compat.v1.constant_initializer(initial),
      aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
      use_resource=True)


def smoothing(samples):
  """Default theta for n samples per update: max(1 - n/1000, 0); n, not S,
  sets how noisy each update's estimate is."""
  return max(1.0 - samples / 1000.0, 0.0)


def check_smoothing(theta, rule):
  """Raises ConfigError unless theta is None, or in [0, 1) with AdaScale."""
  if theta is None:
    return
  if not 0.0 <= theta < 1.0:
    raise errors.ConfigError(
        f"adascale_smoothing={theta} must be in [0, 1) (0: no smoothing; "
        "unset: max(1 - n/1000, 0) with n the gradient samples per update)")
  if rule != "adascale":
    raise errors.ConfigError(f"adascale_smoothing={theta} needs "
                             "lr_scaling='adascale'")


def check_samples(batch_scale, samples):
  """Raises ConfigError when S > 1 but the variance cannot be estimated."""
  if batch_scale > 1 and samples < 2:
    raise errors.ConfigError(
        f"lr_scaling='adascale' with batch_scale={batch_scale:g} needs at "
        "least 2 gradient samples per update to estimate the gradient "
        "variance; use accumulation_steps >= 2 or more workers/replicas")


def check_parts(parts, rule):
  """Raises ConfigError unless `parts` is in `choices.ADASCALE_PARTS` ("all"
  unless `rule` is AdaScale)."""
  choices.require("adascale_parts", parts, choices.ADASCALE_PARTS)
  if parts != "all" and rule != "adascale":
    raise errors.ConfigError(f"adascale_parts={parts!r} needs "
                             "lr_scaling='adascale'")


def part_groups(grads, variables):
  """[embedding tables, dense variables] of one micro-batch's gradients: a
  table's noise differs, as only examples holding its ids update it."""
  tables = [v for g, v in zip(grads, variables)
            if isinstance(g, tf.IndexedSlices)]
  dense = [v for g, v in zip(grads, variables)
           if not isinstance(g, tf.IndexedSlices)]
  return [tables, dense]


class AdaScale:
  """AdaScale's state variables and the ops of one update.

  Args:
    scale: S.
    samples: n (>= 2 when S > 1).
    theta: the moving-average factor (None: `smoothing(samples)`).
    scope: where the state lives (a second optimizer's own group).
    progress: another state's tau to read (never `advance` this one then).
  """

  def __init__(self, scale, samples, theta=None, scope=SCOPE, progress=None):
    check_samples(scale, samples)
    check_smoothing(theta, "adascale")
    self.theta = smoothing(samples) if theta is None else float(theta)
    self.scale = float(scale)
    self.samples = int(samples)
    with tf.compat.v1.variable_scope(scope, reuse=tf.compat.v1.AUTO_REUSE):
      self.gain = _variable(GAIN, initial=1.0)
      self.progress = (_variable(PROGRESS, tf.float64) if progress is None
                       else progress)
      self.scale_variable = _variable(SCALE, initial=scale)
      self.grad_var_avg = _variable(GRAD_VAR_AVG)
      self.grad_sqr_avg = _variable(GRAD_SQR_AVG)
      self.ema_weight = _variable(EMA_WEIGHT)
      self.nonfinite_updates = _variable(NONFINITE_UPDATES, tf.int64, 0)

  def _estimates(self, mean_grads, sum_squared_norms, extra_mean_sq):
    """(sigma^2, mu^2) at the S = 1 batch and whether finite; see module."""
    n, scale = float(self.samples), self.scale
    mean_sq = gradients.total_squared_norm(mean_grads) + extra_mean_sq
    sample_var = (sum_squared_norms - n * mean_sq) / (n - 1.0)
    var = sample_var * (scale / n)
    sqr = mean_sq - var / scale
    finite = tf.math.is_finite(mean_sq) & tf.math.is_finite(sum_squared_norms)
    return tf.maximum(var, MIN_VARIANCE), tf.maximum(sqr, 0.0), finite

  def update(self, mean_grads, sum_squared_norms, schedule,
             extra_mean_squared_norm=0.0, also_finite=True):
    """Ops that compute this update's gain and learning rate.

    Args:
      mean_grads: the global mean gradient (identical on every replica).
      sum_squared_norms: sum of ||g_i||^2 over all n samples (global).
      schedule: maps a float step to the S = 1 learning rate.
      extra_mean_squared_norm: squared norm of a part of the mean gradient
        not in `mean_grads` (sharded tables').
      also_finite: a bool tensor also required finite.

    Returns:
      (learning_rate, finite, assign_ops): the rate (0 when not finite), and
      the state writes to run before `advance`.
    """
    if self.samples < 2:
      finite = tf.math.is_finite(gradients.total_squared_norm(mean_grads) +
                                 extra_mean_squared_norm) & also_finite
      gain = tf.constant(1.0)
      assigns = [self.gain.assign(gain), self.scale_variable.assign(1.0)]
    else:
      var, sqr, finite = self._estimates(mean_grads, sum_squared_norms,
                                         extra_mean_squared_norm)
      finite = finite & also_finite
      theta = self.theta
      weight = theta * self.ema_weight + (1.0 - theta)
      var_avg = theta * self.grad_var_avg + (1.0 - theta) * var
      sqr_avg = theta * self.grad_sqr_avg + (1.0 - theta) * sqr
      weight, var_avg, sqr_avg = [
          tf.where(finite, new, old) for new, old in
          ((weight, self.ema_weight), (var_avg, self.grad_var_avg),
           (sqr_avg, self.grad_sqr_avg))]
      var_hat, sqr_hat = var_avg / weight, sqr_avg / weight
      gain = (var_hat + sqr_hat) / (var_hat / self.scale + sqr_hat)
      assigns = [self.ema_weight.assign(weight),
                 self.grad_var_avg.assign(var_avg),
                 self.grad_sqr_avg.assign(sqr_avg),
                 self.gain.assign(gain),
                 self.scale_variable.assign(self.scale)]
    assigns.append(self.nonfinite_updates.assign_add(
        tf.cast(tf.logical_not(finite), tf.int64)))
    base = schedule(tf.floor(self.progress.read_value()))
    learning_rate = tf.where(finite, gain * base, 0.0)
    self._pending_gain = (gain, finite)
    return learning_rate, finite, assigns

  def advance(self):
    """tau += r for the update `update` described (unchanged if not finite)."""
    gain, finite = self._pending_gain
    step = tf.where(finite, tf.cast(gain, tf.float64),
                    tf.constant(0.0, tf.float64))
    return self.progress.assign_add(step)


def summaries(state):
  """TensorBoard scalars for the AdaScale state."""
  tf.compat.v1.summary.scalar(GAIN, state.gain.read_value())
  tf.compat.v1.summary.scalar(PROGRESS, state.progress.read_value())
  tf.compat.v1.summary.scalar(SCALE, state.scale_variable.read_value())

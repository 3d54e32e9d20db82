"""AdaScale (Johnson et al., ICML 2020): the gain ratio and scale-invariant progress.

With S gradient samples g_1..g_S per update (micro-batches x replicas) and
their mean g, the per-sample variance and the squared mean gradient are
estimated without bias as

  var = sum ||g_i||^2 / (S - 1) - S / (S - 1) ||g||^2      (clipped >= 1e-6)
  sqr = ||g||^2 - var / S                                 (clipped >= 0)

smoothed by a bias-corrected moving average of factor max(1 - S/1000, 0)
(or a factor the user sets: it remembers about 1/(1 - theta) updates, which
is too long for a run of few updates at large S; see docs/ADASCALE.md), and
the gain r = (var + sqr) / (var / S + sqr) lies in [1, S]. The update uses
lr = r x schedule(floor(tau)) and then tau += r, so tau counts progress in
steps of the S = 1 schedule. These conventions follow the widely used
PyTorch implementation so results compare.

All state lives in variables under `adascale/`, so it is checkpointed, shown
in TensorBoard and readable with `estimator.get_variable_value`.
"""
import tensorflow as tf

from estimator_scale.train_ops import accumulation

SCOPE = "adascale"
MIN_VARIANCE = 1e-6


def _variable(name, dtype=tf.float32, initial=0.0):
  return tf.compat.v1.get_variable(
      name, shape=[], dtype=dtype, trainable=False,
      initializer=tf.compat.v1.constant_initializer(initial),
      aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
      use_resource=True)


def smoothing(scale):
  """The default moving-average factor theta for a scale S."""
  return max(1.0 - scale / 1000.0, 0.0)


def check_smoothing(theta):
  """Raises ValueError unless theta is None (the default) or in [0, 1)."""
  if theta is not None and not 0.0 <= theta < 1.0:
    raise ValueError("--adascale_smoothing must be in [0, 1) (0: no "
                     f"smoothing; unset: max(1 - S/1000, 0)), got {theta}")


def check_samples(scale, samples):
  """Raises ValueError when S > 1 but the variance cannot be estimated."""
  if scale > 1 and samples < 2:
    raise ValueError(
        f"--lr_scaling=adascale with --scale={scale:g} needs at least 2 "
        "gradient samples per update to estimate the gradient variance; use "
        "--accumulation_steps >= 2 or more workers/replicas")


class AdaScale:
  """AdaScale's state variables and the ops of one update.

  Args:
    scale: S, used in the gain and the default smoothing factor.
    samples: gradient samples averaged per update (equals S unless the user
      overrode the scale); at least 2 when the scale exceeds 1.
    theta: the moving-average factor (None: `smoothing(scale)`).
  """

  def __init__(self, scale, samples, theta=None):
    check_samples(scale, samples)
    check_smoothing(theta)
    self.theta = smoothing(scale) if theta is None else float(theta)
    self.scale = float(scale)
    self.samples = int(samples)
    with tf.compat.v1.variable_scope(SCOPE, reuse=tf.compat.v1.AUTO_REUSE):
      self.gain = _variable("gain", initial=1.0)
      self.progress = _variable("progress", tf.float64)
      self.scale_variable = _variable("scale", initial=scale)
      self.grad_var_avg = _variable("grad_var_avg")
      self.grad_sqr_avg = _variable("grad_sqr_avg")
      self.ema_weight = _variable("ema_weight")
      self.nonfinite_updates = _variable("nonfinite_updates", tf.int64, 0)

  def _estimates(self, mean_grads, sum_squared_norms):
    """Unbiased (var, sqr) of this update, from global quantities."""
    n = float(self.samples)
    mean_sq = accumulation.total_squared_norm(mean_grads)
    var = sum_squared_norms / (n - 1.0) - n / (n - 1.0) * mean_sq
    var = tf.maximum(var, MIN_VARIANCE)
    sqr = tf.maximum(mean_sq - var / n, 0.0)
    return var, sqr, tf.math.is_finite(mean_sq) & tf.math.is_finite(
        sum_squared_norms)

  def update(self, mean_grads, sum_squared_norms, schedule):
    """Ops that compute this update's gain and learning rate.

    Args:
      mean_grads: the global mean gradient (identical on every replica).
      sum_squared_norms: sum of ||g_i||^2 over all S samples (global).
      schedule: maps a float step to the S = 1 learning rate.

    Returns:
      (learning_rate, finite, assign_ops): the rate to apply (0 when the
      gradients are not finite, so the update is skipped), a bool tensor, and
      the ops that store the new state; run them before `advance`.
    """
    if self.samples < 2:
      finite = tf.math.is_finite(accumulation.total_squared_norm(mean_grads))
      gain = tf.constant(1.0)
      assigns = [self.gain.assign(gain), self.scale_variable.assign(1.0)]
    else:
      var, sqr, finite = self._estimates(mean_grads, sum_squared_norms)
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
  tf.compat.v1.summary.scalar("adascale/gain", state.gain.read_value())
  tf.compat.v1.summary.scalar("adascale/progress", state.progress.read_value())
  tf.compat.v1.summary.scalar("adascale/scale", state.scale_variable.read_value())

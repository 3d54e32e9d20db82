"""Optimizer registry: names the CLI accepts, mapped to v1 graph optimizers.

Estimator's graph mode needs `tf.compat.v1.train` optimizers; AdamW is not
among them, so decoupled weight decay is added here.
"""
import tensorflow as tf

_V1 = tf.compat.v1.train


class AdamWOptimizer(_V1.AdamOptimizer):
  """Adam with weight decay decoupled from the gradient (Loshchilov & Hutter).

  The decay `lr * weight_decay * var` is taken before the Adam step, so it
  follows the learning-rate schedule but never enters Adam's moment estimates,
  which is the point of decoupling.
  """

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


def _sgd(lr, **unused):
  return _V1.GradientDescentOptimizer(lr)


def _momentum(lr, momentum=0.9, nesterov=False, **unused):
  return _V1.MomentumOptimizer(lr, momentum=momentum, use_nesterov=nesterov)


def _adam(lr, beta1=0.9, beta2=0.999, epsilon=1e-8, **unused):
  return _V1.AdamOptimizer(lr, beta1=beta1, beta2=beta2, epsilon=epsilon)


def _adamw(lr, beta1=0.9, beta2=0.999, epsilon=1e-8, weight_decay=0.01,
           **unused):
  return AdamWOptimizer(lr, weight_decay=weight_decay, beta1=beta1,
                        beta2=beta2, epsilon=epsilon)


OPTIMIZERS = {"sgd": _sgd, "momentum": _momentum, "adam": _adam,
              "adamw": _adamw}


def check_optimizer(name):
  """Raises ValueError naming the valid optimizers when `name` is not one."""
  if name not in OPTIMIZERS:
    raise ValueError(f"--optimizer={name!r} is unknown; valid: "
                     f"{', '.join(sorted(OPTIMIZERS))}")


def make_optimizer(name, learning_rate, **options):
  """Builds the named optimizer around a (possibly tensor) learning rate.

  Args:
    name: a key of `OPTIMIZERS`.
    learning_rate: float or scalar tensor, already scaled and scheduled.
    **options: optimizer settings (momentum, beta1, weight_decay, ...); those
      an optimizer does not use are ignored so one config serves all.

  Returns:
    A `tf.compat.v1.train.Optimizer`.
  """
  check_optimizer(name)
  return OPTIMIZERS[name](learning_rate, **options)

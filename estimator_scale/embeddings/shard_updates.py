"""Adam's update of a table held in slices, a block of rows at a time.

v1 Adam applies a sparse gradient with dense ops, each making a
variable-sized temporary, and a dense read of a gathered resource variable
copies it: an update holds several slice-sized buffers, which add up on a
ps task with many parts. For slices (variables with save slice info) the
same arithmetic runs on blocks of `BLOCK_ROWS` rows by gathers and
scatters, which never copy; slots start from `Empty`, not zeros constant
folding would keep. SGD, Adagrad and FTRL already touch only their rows.
"""
import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops  # pylint: disable=g-direct-tensorflow-import

BLOCK_ROWS = 1 << 13
"""Rows a block of the update reads and writes at once."""


def is_slice(variable):
  """Whether `variable` is a slice (a shard, or a ps part) of a larger one."""
  return getattr(variable, "_save_slice_info", None) is not None


def update_in_blocks(optimizer):
  """Makes v1 Adam `optimizer` update slices of tables block by block; other
  optimizers and variables are untouched; idempotent."""
  if type(optimizer) is not tf.compat.v1.train.AdamOptimizer:  # pylint: disable=unidiomatic-typecheck
    return
  whole = optimizer._resource_apply_sparse  # pylint: disable=protected-access
  if getattr(whole, "in_blocks", False):
    return
  create_slots = optimizer._create_slots  # pylint: disable=protected-access
  latest = {}  # (graph, device): the last slice update built there

  def apply(grad, variable, indices):
    if not is_slice(variable):
      return whole(grad, variable, indices)
    # The slices of one device update one after another, so the device
    # holds one slice's blocks at a time, not one per slice.
    key = (tf.compat.v1.get_default_graph(), variable.device)
    latest[key] = _adam_in_blocks(optimizer, grad, variable, indices,
                                  latest.get(key))
    return latest[key]

  def create(variables):
    for variable in variables:
      if is_slice(variable):
        for slot in ("m", "v"):
          optimizer._get_or_make_slot_with_initializer(  # pylint: disable=protected-access
              variable, _zeros, variable.shape, variable.dtype.base_dtype,
              slot, optimizer._name)  # pylint: disable=protected-access
    create_slots(variables)
  apply.in_blocks = True
  optimizer._resource_apply_sparse = apply  # pylint: disable=protected-access
  optimizer._create_slots = create  # pylint: disable=protected-access


def _zeros(shape, dtype=None, partition_info=None):
  """Zeros that constant folding leaves alone (see the module's note)."""
  del partition_info
  return tf.raw_ops.Empty(shape=tf.constant(shape, tf.int32), dtype=dtype,
                          init=True)


def _over_blocks(rows, update, after=()):
  """Runs `update(row_ids)` per block of `rows` in turn, after `after`;
  returns the loop's last value, to depend on."""

  def body(first):
    ids = tf.range(first, tf.minimum(first + BLOCK_ROWS, rows))
    with tf.control_dependencies(update(ids)):
      return [first + BLOCK_ROWS]

  with tf.control_dependencies(after):
    (last,) = tf.while_loop(lambda first: first < rows, body,
                            [tf.constant(0)], parallel_iterations=1)
  return last


def _scaled(variable, factor):
  """update(ids) scaling `variable`'s rows `ids` by `factor`."""
  return lambda ids: [resource_variable_ops.resource_scatter_update(
      variable.handle, ids, tf.gather(variable, ids) * factor)]


def adam_terms(optimizer, dtype):
  """(bias-corrected rate, beta1, beta2, epsilon) of v1 Adam, in `dtype`."""
  beta1_power, beta2_power = (
      tf.cast(p, dtype) for p in optimizer._get_beta_accumulators())  # pylint: disable=protected-access
  beta1, beta2, epsilon = (tf.cast(t, dtype) for t in (
      optimizer._beta1_t, optimizer._beta2_t, optimizer._epsilon_t))  # pylint: disable=protected-access
  rate = (tf.cast(optimizer._lr_t, dtype) * tf.sqrt(1 - beta2_power) /  # pylint: disable=protected-access
          (1 - beta1_power))
  return rate, beta1, beta2, epsilon


def _adam_in_blocks(optimizer, grad, variable, indices, after=None):
  """v1 Adam's sparse update of `variable` over every row, by blocks, after
  op `after` (if any); `indices` appear once each."""
  lr, beta1, beta2, epsilon = adam_terms(optimizer,
                                         variable.dtype.base_dtype)
  m = optimizer.get_slot(variable, "m")
  v = optimizer.get_slot(variable, "v")
  rows = tf.shape(variable, out_type=tf.int32)[0]

  def decay(ids):
    return _scaled(m, beta1)(ids) + _scaled(v, beta2)(ids)
  decayed = _over_blocks(rows, decay, [after] if after is not None else [])
  with tf.control_dependencies([decayed]):
    added = [
        resource_variable_ops.resource_scatter_add(
            m.handle, indices, grad * (1 - beta1)),
        resource_variable_ops.resource_scatter_add(
            v.handle, indices, (grad * grad) * (1 - beta2))]

  def step(ids):
    return [resource_variable_ops.resource_scatter_update(
        variable.handle, ids, tf.gather(variable, ids) - lr * tf.gather(
            m, ids) / (tf.sqrt(tf.gather(v, ids)) + epsilon))]
  return tf.group(_over_blocks(rows, step, added))

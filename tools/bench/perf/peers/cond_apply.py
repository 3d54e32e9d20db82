"""The conditional-apply gradient accumulator most Estimator code bases carry.

Every session run computes one micro-batch's gradients and adds them to
non-trainable accumulator variables; every k-th run a `tf.cond` applies the
mean and zeroes the accumulators. It is the fair peer of the framework's
in-graph accumulation because it is the widely copied answer to "accumulate
gradients in TF 1.x" and uses the same network, optimizer and input pipeline;
it reads one micro-batch per run, so it is timed over k times as many runs
for the same number of examples.
"""
import tensorflow as tf

from tools.bench.perf.peers import handwritten


def make_model_fn(build_network, learning_rate, accumulation_steps,
                  momentum=0.9):
  """A model_fn that applies the mean gradient of every k micro-batches.

  `build_network(params) -> network(features, training)`, as for
  handwritten.make_model_fn; each run's state updates (moving statistics)
  run before its gradients are added, once per micro-batch.
  """
  k = accumulation_steps

  def model_fn(features, labels, mode, params):
    logits, updates = handwritten.forward(
        build_network(params), features, mode == tf.estimator.ModeKeys.TRAIN)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits))
    global_step = tf.compat.v1.train.get_or_create_global_step()
    optimizer = tf.compat.v1.train.MomentumOptimizer(learning_rate, momentum)
    grads_and_vars = [(g, v) for g, v in optimizer.compute_gradients(loss)
                      if g is not None]
    sums = [tf.compat.v1.get_variable(
        f"accumulate/{i}", v.shape, v.dtype.base_dtype, trainable=False,
        initializer=tf.compat.v1.zeros_initializer())
            for i, (_, v) in enumerate(grads_and_vars)]
    count = tf.compat.v1.get_variable(
        "accumulate/count", [], tf.int64, trainable=False,
        initializer=tf.compat.v1.zeros_initializer())
    with tf.control_dependencies(updates):
      added = [s.assign_add(g) for s, (g, _) in zip(sums, grads_and_vars)]
      counted = count.assign_add(1)

    def apply_and_reset():
      apply = optimizer.apply_gradients(
          [(s / k, v) for s, (_, v) in zip(sums, grads_and_vars)],
          global_step=global_step)
      with tf.control_dependencies([apply]):
        resets = [s.assign(tf.zeros_like(s)) for s in sums]
      with tf.control_dependencies(resets):
        return tf.constant(True)

    with tf.control_dependencies(added):
      applied = tf.cond(tf.equal(counted % k, 0), apply_and_reset,
                        lambda: tf.constant(False))
    return tf.estimator.EstimatorSpec(mode, loss=loss,
                                      train_op=tf.group(applied))

  return model_fn

"""The hand-written Estimator model_fn: the peer of the factory's model_fn.

It is the canonical TF 1.x shape: call the network, take the mean softmax
cross-entropy, run the batch-norm UPDATE_OPS before `MomentumOptimizer
.minimize`, return an EstimatorSpec. The benchmark hands it the very network
function of the model zoo (`model.logits`), the same optimizer settings and
the same input_fn as the factory run, so the ratio measures only what the
factory adds around them (the micro-batch template, the staged train-op
pipeline, its hooks). It is also the "plain training" peer of the
accumulation row: no accumulation at all, one update per micro-batch.
"""
import tensorflow as tf


def make_model_fn(network, learning_rate, momentum=0.9, wrap=None):
  """A model_fn for `network(features, training, params) -> logits`.

  `wrap` (optimizer -> optimizer) is where a Horovod script puts
  `hvd.DistributedOptimizer`; the rest of the usual shape is the same.
  """

  def model_fn(features, labels, mode, params):
    logits = network(features, mode == tf.estimator.ModeKeys.TRAIN, params)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits))
    optimizer = tf.compat.v1.train.MomentumOptimizer(learning_rate, momentum)
    if wrap is not None:
      optimizer = wrap(optimizer)
    update_ops = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)
    with tf.control_dependencies(update_ops):
      train_op = optimizer.minimize(
          loss, global_step=tf.compat.v1.train.get_or_create_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

  return model_fn

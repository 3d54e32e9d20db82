"""The hand-written Estimator model_fn: the peer of the factory's model_fn.

It is the canonical TF 1.x shape: build the network, take the mean softmax
cross-entropy, make `MomentumOptimizer.minimize` wait for the network's
state updates (batch-norm moving statistics), return an EstimatorSpec. The
benchmark hands it the very network of the model zoo (`zoo_network`), the
same optimizer settings and the same input_fn as the factory run, so the
ratio measures only what the factory adds around them (the micro-batch
template, the staged train-op pipeline, its hooks). It is also the "plain
training" peer of the accumulation row: no accumulation at all, one update
per micro-batch.
"""
import tensorflow as tf

# Op types that write a variable, resource and reference variables alike.
_WRITE_PREFIXES = ("Assign", "ResourceScatter", "Scatter")


def zoo_network(model):
  """A zoo model's network, built as the zoo's models expect to be built.

  Returns build(params) -> network(features, training) -> outputs. Call
  build once per graph, in the model_fn: a model that returns a
  tf.keras.Model from `keras_model` is created there, once, and called on
  its `keras_inputs`; the others create their layers in `logits`.
  """

  def build(params):
    keras_model = model.keras_model(params)
    if keras_model is None:
      return lambda features, training: model.logits(features, training,
                                                     params)
    return lambda features, training: keras_model(
        model.keras_inputs(features), training=training)

  return build


def forward(network, features, training):
  """The network's outputs and the state updates its forward pass made.

  Keras layers keep their batch-norm updates on the layer object
  (`layer.updates`), not in UPDATE_OPS, and a network that creates its
  layers inside the call (resnet20's `logits`) leaves the model_fn no layer
  to ask; v1 layers put theirs in UPDATE_OPS. The graph has them all: every
  variable write the forward pass created, less the initializers of the
  variables it created. Nothing the loss needs waits for them, so the train
  op must, or the moving statistics never change.
  """
  graph = tf.compat.v1.get_default_graph()
  first_op = len(graph.get_operations())
  outputs = network(features, training)
  initializers = {v.initializer for v in tf.compat.v1.global_variables()}
  writes = [op for op in graph.get_operations()[first_op:]
            if op.type.startswith(_WRITE_PREFIXES) and op not in initializers]
  return outputs, writes


def make_model_fn(build_network, learning_rate, momentum=0.9, wrap=None):
  """A model_fn around `build_network(params) -> network(features, training)`.

  `wrap` (optimizer -> optimizer) is where a Horovod script puts
  `hvd.DistributedOptimizer`; the rest of the usual shape is the same.
  """

  def model_fn(features, labels, mode, params):
    logits, updates = forward(build_network(params), features,
                              mode == tf.estimator.ModeKeys.TRAIN)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits))
    optimizer = tf.compat.v1.train.MomentumOptimizer(learning_rate, momentum)
    if wrap is not None:
      optimizer = wrap(optimizer)
    with tf.control_dependencies(updates):
      train_op = optimizer.minimize(
          loss, global_step=tf.compat.v1.train.get_or_create_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

  return model_fn

"""ResNet-20 (He et al. 2016, CIFAR variant) on CIFAR-shaped synthetic data.

For throughput work only: the inputs are random, so accuracy means nothing.
"""
import tensorflow as tf

import estimator_scale as es

_layers = tf.compat.v1.layers


def _bn(net, training, name):
  return _layers.batch_normalization(net, training=training, momentum=0.9,
                                     name=name)


def _block(net, filters, stride, training, name):
  shortcut = net
  out = _layers.conv2d(net, filters, 3, stride, padding="same", use_bias=False,
                       name=f"{name}/conv1")
  out = tf.nn.relu(_bn(out, training, f"{name}/bn1"))
  out = _layers.conv2d(out, filters, 3, padding="same", use_bias=False,
                       name=f"{name}/conv2")
  out = _bn(out, training, f"{name}/bn2")
  if stride != 1 or shortcut.shape[-1] != filters:
    shortcut = _layers.conv2d(shortcut, filters, 1, stride, use_bias=False,
                              name=f"{name}/shortcut")
    shortcut = _bn(shortcut, training, f"{name}/shortcut_bn")
  return tf.nn.relu(out + shortcut)


@es.register
class ResNet20(es.ClassifierModel):
  """ResNet-20 for 32x32x3 images, fed synthetic CIFAR-shaped batches."""

  name = "resnet20"

  def default_hparams(self):
    """See base class."""
    return {"blocks_per_stage": 3, "base_filters": 16}

  def logits(self, features, training, params):
    """See base class."""
    net = _layers.conv2d(features["image"], params["base_filters"], 3,
                         padding="same", use_bias=False, name="stem")
    net = tf.nn.relu(_bn(net, training, "stem_bn"))
    for stage in range(3):
      filters = params["base_filters"] * 2 ** stage
      for block in range(params["blocks_per_stage"]):
        stride = 2 if stage and not block else 1
        net = _block(net, filters, stride, training, f"stage{stage}/block{block}")
    net = tf.reduce_mean(net, axis=[1, 2])
    return _layers.dense(net, 10, name="logits")

  def serving_features(self):
    """See base class."""
    return {"image": tf.TensorSpec([32, 32, 3], tf.float32)}

  def input_fn(self, mode, global_batch_size, params, topology=None,
               accumulation_steps=1):
    """See base class."""
    return es.inputs.synthetic(
        {"image": (32, 32, 3)}, global_batch_size, num_classes=10,
        training=mode == tf.estimator.ModeKeys.TRAIN, topology=topology,
        accumulation_steps=accumulation_steps)

"""ResNet-20 (He et al. 2016, CIFAR variant) on CIFAR-shaped synthetic data.

For throughput work only: the inputs are random, so accuracy means nothing.
"""
import tensorflow as tf

import estimator_scale as es

layers = tf.keras.layers


def _conv(filters, kernel_size, strides, name, padding="same"):
  return layers.Conv2D(filters, kernel_size, strides, padding=padding,
                       use_bias=False, name=name)


def _batch_norm(name):
  return layers.BatchNormalization(momentum=0.9, name=name)


def _block(net, filters, stride, training, name):
  """Two 3x3 convolutions and a shortcut (1x1 where the shape changes)."""
  shortcut = net
  out = _conv(filters, 3, stride, f"{name}/conv1")(net)
  out = tf.nn.relu(_batch_norm(f"{name}/bn1")(out, training=training))
  out = _conv(filters, 3, 1, f"{name}/conv2")(out)
  out = _batch_norm(f"{name}/bn2")(out, training=training)
  if stride != 1 or shortcut.shape[-1] != filters:
    shortcut = _conv(filters, 1, stride, f"{name}/shortcut",
                     padding="valid")(shortcut)
    shortcut = _batch_norm(f"{name}/shortcut_bn")(shortcut, training=training)
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
    net = _conv(params["base_filters"], 3, 1, "stem")(features["image"])
    net = tf.nn.relu(_batch_norm("stem_bn")(net, training=training))
    for stage in range(3):
      filters = params["base_filters"] * 2 ** stage
      for block in range(params["blocks_per_stage"]):
        stride = 2 if stage and not block else 1
        net = _block(net, filters, stride, training, f"stage{stage}/block{block}")
    net = layers.GlobalAveragePooling2D(name="pool")(net)
    return layers.Dense(10, name="logits")(net)

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

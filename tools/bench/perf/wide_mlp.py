"""The network bench's large-gradient model: a wide MLP of about 25 MB.

resnet20's 1.1 MB of gradients leave a link mostly idle until it is slow;
this model's 6.3 million weights (25 MB of float32 gradients per update) at
a compute cost per example comparable to resnet20's put the exchange, not
the arithmetic, on the critical path, the regime where compression and
accumulation are meant to pay.
"""
import tensorflow as tf

import estimator_scale as es

INPUTS, WIDTH, CLASSES = 1024, 2048, 10


@es.register
class BenchWideMlp(es.ClassifierModel):
  """INPUTS -> WIDTH -> WIDTH -> CLASSES, ReLU, on synthetic features."""

  name = "bench_wide_mlp"

  def logits(self, features, training, params):
    net = features["x"]
    for i in range(2):
      net = tf.keras.layers.Dense(WIDTH, activation="relu",
                                  name=f"hidden{i}")(net)
    return tf.keras.layers.Dense(CLASSES, name="out")(net)

  def serving_features(self):
    return {"x": tf.TensorSpec([INPUTS], tf.float32)}

  def input_fn(self, mode, global_batch_size, params, topology=None,
               accumulation_steps=1):
    """See base class: one synthetic batch, repeated."""
    return es.inputs.synthetic(
        {"x": (INPUTS,)}, global_batch_size, num_classes=CLASSES,
        training=mode == tf.estimator.ModeKeys.TRAIN, topology=topology,
        accumulation_steps=accumulation_steps)

"""The model_fn of Horovod's own Estimator example (its MNIST CNN), in that
shape on the 8x8 digits: signature `(features, labels, mode)`, no params,
the network built inline, predictions returned early in PREDICT mode, the
loss computed inline. Only its train op differs: Horovod's example wraps
its optimizer in `hvd.DistributedOptimizer` and calls `minimize`; here the
loss it already computed goes to `es.build_train_op`.

Run as a script, it trains on the digits under --distribution and writes
the chief's test accuracy to --out.
"""
import json

from absl import app
from absl import flags
import tensorflow as tf

import estimator_scale as es
from model_zoo import digits_data

FLAGS = flags.FLAGS


def _define_flags():
  """Defined when run as a script only: tests import this module, and their
  process holds other modules' flags of the same names."""
  flags.DEFINE_string("distribution", "none", "backend")
  flags.DEFINE_string("model_dir", None, "")
  flags.DEFINE_string("out", None, "where the chief writes {accuracy, ...}")
  flags.DEFINE_integer("steps", 200, "updates")
  flags.DEFINE_integer("global_batch_size", 64, "")


layers = tf.keras.layers


def make_cnn_model_fn(training_config, topology):
  """The example's cnn_model_fn, bound to the job's training settings."""

  def cnn_model_fn(features, labels, mode):
    """Model function for CNN."""
    # [batch, 64] pixels -> [batch, 8, 8, 1] images.
    input_layer = tf.reshape(features["x"], [-1, 8, 8, 1])
    conv1 = layers.Conv2D(32, 3, padding="same", activation="relu")(
        input_layer)
    pool1 = layers.MaxPooling2D(2, strides=2)(conv1)
    conv2 = layers.Conv2D(64, 3, padding="same", activation="relu")(pool1)
    pool2 = layers.MaxPooling2D(2, strides=2)(conv2)
    pool2_flat = tf.reshape(pool2, [-1, 2 * 2 * 64])
    dense = layers.Dense(256, activation="relu")(pool2_flat)
    dropout = layers.Dropout(0.4)(
        dense, training=mode == tf.estimator.ModeKeys.TRAIN)
    logits = layers.Dense(10)(dropout)

    predictions = {
        "classes": tf.argmax(logits, axis=1),
        "probabilities": tf.nn.softmax(logits, name="softmax_tensor"),
    }
    if mode == tf.estimator.ModeKeys.PREDICT:
      return tf.estimator.EstimatorSpec(mode=mode, predictions=predictions)

    onehot_labels = tf.one_hot(tf.cast(labels, tf.int32), depth=10)
    loss = tf.reduce_mean(tf.keras.losses.categorical_crossentropy(
        onehot_labels, logits, from_logits=True))

    if mode == tf.estimator.ModeKeys.TRAIN:
      # Was: hvd.DistributedOptimizer(optimizer).minimize(loss, global_step).
      train_op = es.build_train_op(lambda *_: loss, features, labels,
                                   training_config, topology).train_op
      return tf.estimator.EstimatorSpec(mode=mode, loss=loss,
                                        train_op=train_op)

    accuracy = tf.keras.metrics.Accuracy(name="accuracy")
    accuracy.update_state(labels, predictions["classes"])
    return tf.estimator.EstimatorSpec(
        mode=mode, loss=loss, eval_metric_ops={"accuracy": accuracy})
  return cnn_model_fn


def digits_input_fns(topology, global_batch_size):
  """(train, eval) input_fns of the digits as the example's "x" pixels."""
  (train_x, train_y), (test_x, test_y) = digits_data.load_split()
  train = es.inputs.from_arrays({"x": train_x.reshape(-1, 64)}, train_y,
                                global_batch_size, topology=topology)
  test = es.inputs.from_arrays({"x": test_x.reshape(-1, 64)}, test_y, 120,
                               training=False)
  return train, test


def main(argv):
  del argv
  scale_config = es.build_run_config(FLAGS.distribution,
                                     model_dir=FLAGS.model_dir, random_seed=0)
  training = es.TrainingConfig(optimizer="momentum",
                               learning_rate=0.01,
                               lr_scaling="linear")
  estimator = es.make_estimator(
      make_cnn_model_fn(training, scale_config.topology),
      scale_config=scale_config, training_config=training)
  train, test = digits_input_fns(scale_config.topology, FLAGS.global_batch_size)
  estimator.train(train, max_steps=FLAGS.steps)
  metrics = estimator.evaluate(test)
  if scale_config.topology.is_chief:
    with open(FLAGS.out, "w", encoding="utf-8") as f:
      json.dump({"accuracy": float(metrics["accuracy"]),
                 "global_step": int(metrics["global_step"]),
                 "workers": scale_config.topology.num_workers}, f)


if __name__ == "__main__":
  _define_flags()
  app.run(main)

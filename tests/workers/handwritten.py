"""A hand-written Estimator model_fn, as TF's Estimator guide teaches, that
trains through the drop-in `es.build_train_op` (accumulation, AdaScale and
the backend's reduction) on the real digits; writes its test accuracy."""
import json

from absl import app
from absl import flags
import tensorflow as tf

import estimator_scale as es
from model_zoo import digits_data

flags.DEFINE_string("distribution", "none", "backend")
flags.DEFINE_string("model_dir", None, "")
flags.DEFINE_string("out", None, "where rank 0 writes {accuracy, gain, ...}")
flags.DEFINE_integer("steps", 300, "updates")
flags.DEFINE_integer("global_batch_size", 64, "")
flags.DEFINE_integer("accumulation_steps", 4, "")
FLAGS = flags.FLAGS


def make_model_fn(training_config, topology):
  """The guide's model_fn; only the TRAIN branch differs (two lines)."""

  def model_fn(features, labels, mode, params):
    def network(images):
      net = tf.keras.layers.Flatten()(images)
      net = tf.keras.layers.Dense(params["units"], activation="relu")(net)
      return tf.keras.layers.Dense(10)(net)

    def loss_fn(micro_features, micro_labels):
      return tf.compat.v1.losses.sparse_softmax_cross_entropy(
          micro_labels, network(micro_features["image"]))

    if mode == tf.estimator.ModeKeys.TRAIN:
      train = es.build_train_op(loss_fn, features, labels, training_config,
                                topology)
      return tf.estimator.EstimatorSpec(mode, loss=train.loss,
                                        train_op=train.train_op)
    logits = network(features["image"])
    loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
    accuracy = tf.compat.v1.metrics.accuracy(labels, tf.argmax(logits, 1))
    return tf.estimator.EstimatorSpec(
        mode, loss=loss, eval_metric_ops={"accuracy": accuracy})
  return model_fn


def main(argv):
  del argv
  scale_config = es.build_run_config(FLAGS.distribution,
                                     model_dir=FLAGS.model_dir, random_seed=0)
  training = es.TrainingConfig(
      optimizer="momentum", learning_rate=0.05,
      accumulation_steps=FLAGS.accumulation_steps, lr_scaling="adascale")
  estimator = es.make_estimator(make_model_fn(training, scale_config.topology),
                                scale_config=scale_config,
                                training_config=training,
                                hparams={"units": 64})
  (train_x, train_y), (test_x, test_y) = digits_data.load_split()
  estimator.train(es.inputs.from_arrays(
      {"image": train_x}, train_y, FLAGS.global_batch_size,
      topology=scale_config.topology,
      accumulation_steps=FLAGS.accumulation_steps), max_steps=FLAGS.steps)
  metrics = estimator.evaluate(es.inputs.from_arrays(
      {"image": test_x}, test_y, 128, training=False))
  if scale_config.topology.is_chief:
    with open(FLAGS.out, "w", encoding="utf-8") as f:
      json.dump({"accuracy": float(metrics["accuracy"]),
                 "gain": float(estimator.get_variable_value(es.ADASCALE_GAIN)),
                 "global_step": int(metrics["global_step"]),
                 "workers": scale_config.topology.num_workers}, f)


if __name__ == "__main__":
  app.run(main)

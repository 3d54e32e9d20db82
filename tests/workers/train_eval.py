"""A worker for the train_and_evaluate tests: digits_mlp through
`es.train_and_evaluate` with tf.estimator's own specs and a BestExporter.

Each worker writes `<out_dir>/result<index>.json`: the evaluations it got,
the step it ended at, and what the exporters returned.
"""
import json
import os

from absl import app
from absl import flags
import tensorflow as tf

import estimator_scale as es
from model_zoo import digits

flags.DEFINE_string("distribution", "none", "backend")
flags.DEFINE_string("model_dir", None, "shared checkpoint directory")
flags.DEFINE_string("out_dir", None, "where result<index>.json goes")
flags.DEFINE_integer("steps", 60, "train_spec.max_steps")
flags.DEFINE_integer("save_checkpoints_steps", 20, "")
flags.DEFINE_integer("eval_every_n_steps", None, "")
flags.DEFINE_float("learning_rate", 0.1, "")
flags.DEFINE_integer("stop_after_steps_without_decrease", None,
                     "adds stop_if_no_decrease on --early_stopping_metric")
flags.DEFINE_string("early_stopping_metric", "loss", "an eval metric")
FLAGS = flags.FLAGS


def main(argv):
  del argv
  model = digits.DigitsMLP()
  estimator = es.make_estimator(
      model, model_dir=FLAGS.model_dir, distribution=FLAGS.distribution,
      training_config=es.TrainingConfig(
          optimizer="momentum",
          learning_rate=FLAGS.learning_rate),
      hparams="hidden_units=32", random_seed=0,
      save_checkpoints_steps=FLAGS.save_checkpoints_steps)
  hooks = []
  if FLAGS.stop_after_steps_without_decrease:
    hooks.append(es.stop_if_no_decrease(
        FLAGS.early_stopping_metric, FLAGS.stop_after_steps_without_decrease))
  train_spec = tf.estimator.TrainSpec(
      estimator.model_input_fn(tf.estimator.ModeKeys.TRAIN, 32),
      max_steps=FLAGS.steps, hooks=hooks)
  exporter = tf.estimator.BestExporter(
      name="best", serving_input_receiver_fn=model.serving_input_receiver_fn(),
      exports_to_keep=1)
  eval_spec = tf.estimator.EvalSpec(
      estimator.model_input_fn(tf.estimator.ModeKeys.EVAL, 64), steps=None,
      exporters=[exporter], throttle_secs=0)
  _, exports = es.train_and_evaluate(
      estimator, train_spec, eval_spec,
      eval_every_n_steps=FLAGS.eval_every_n_steps)
  result = {
      "last_step": estimator.last_step,
      "evaluations": [{k: float(v) for k, v in e.items()}
                      for e in estimator.evaluations],
      "exports": {k: os.fsdecode(v) if v else None
                  for k, v in exports.items()},
  }
  os.makedirs(FLAGS.out_dir, exist_ok=True)
  index = estimator.topology.worker_index
  with open(os.path.join(FLAGS.out_dir, f"result{index}.json"), "w") as f:
    json.dump(result, f)


if __name__ == "__main__":
  app.run(main)

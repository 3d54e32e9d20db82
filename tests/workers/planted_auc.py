"""Trains a feature-column model on data with a planted logistic rule; writes
its AUC on held-out data beside the rule's own (the best reachable).

Accumulation and AdaScale run on whatever backend --distribution names; the
chief (Horovod rank 0) scores the evaluation set from the final checkpoint.
"""
import json

from absl import app
from absl import flags
from sklearn import metrics
import numpy as np

import estimator_scale as es
from tests.workers import feature_models

flags.DEFINE_string("distribution", "none", "backend")
flags.DEFINE_string("model_dir", None, "")
flags.DEFINE_string("out", None, "where the chief writes {auc, planted_auc, ...}")
flags.DEFINE_string("case", "feature_columns", "a feature_models.CASES model")
flags.DEFINE_integer("examples", 20000, "training examples")
flags.DEFINE_integer("steps", 300, "updates")
flags.DEFINE_integer("global_batch_size", 256, "")
flags.DEFINE_integer("accumulation_steps", 4, "")
flags.DEFINE_float("learning_rate", 0.03, "the S = 1 rate")
flags.DEFINE_string("optimizer", "momentum", "")
flags.DEFINE_string("lr_scaling", "adascale", "")
FLAGS = flags.FLAGS


def main(argv):
  del argv
  features, labels, _ = feature_models.planted_data(FLAGS.examples, seed=0)
  held_out, held_out_labels, planted = feature_models.planted_data(
      5000, seed=1)
  config = es.TrainingConfig(
      optimizer=FLAGS.optimizer,
      learning_rate=FLAGS.learning_rate,
      accumulation_steps=FLAGS.accumulation_steps,
      lr_scaling=FLAGS.lr_scaling)
  estimator = es.make_estimator(
      feature_models.MODELS[FLAGS.case](), model_dir=FLAGS.model_dir,
      distribution=FLAGS.distribution, training_config=config,
      random_seed=0)
  topology = estimator.topology
  estimator.train(es.inputs.from_arrays(
      features, labels, FLAGS.global_batch_size, topology=topology,
      accumulation_steps=FLAGS.accumulation_steps), max_steps=FLAGS.steps)
  if not topology.is_chief:
    return
  scored = estimator.predict(es.inputs.from_arrays(
      held_out, held_out_labels, 500, training=False),
                             predict_keys=["probabilities"])
  probabilities = np.array([p["probabilities"][1] for p in scored])
  with open(FLAGS.out, "w", encoding="utf-8") as f:
    json.dump({"auc": metrics.roc_auc_score(held_out_labels, probabilities),
               "planted_auc": metrics.roc_auc_score(held_out_labels, planted),
               "gain": (float(estimator.get_variable_value(es.ADASCALE_GAIN))
                        if FLAGS.lr_scaling == "adascale" else None),
               "global_step": int(estimator.get_variable_value("global_step")),
               "workers": topology.num_workers}, f)


if __name__ == "__main__":
  app.run(main)

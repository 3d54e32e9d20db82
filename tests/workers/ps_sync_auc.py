"""A worker for the synchronous parameter-server tests: wide & deep's AUC.

Trains the zoo's wide & deep over the informative columns
(tests/helpers/click_columns.py; the framework's pipeline, Adagrad) on the
generated click logs held as arrays, so training reads them in the input
position's order: update u trains examples [uB, (u + 1)B) on one process
and on synchronous workers alike (TFRecord files would be shared out by
file). When training ends, the chief waits until every other worker has
exited, then predicts the eval split itself, which must not wait for the
exited workers, and writes `<out_dir>/score.json` with the exact AUC.
"""
import json
import os
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

import estimator_scale as es
from model_zoo import click_data
from model_zoo import wide_deep
from tests.helpers import click_columns

flags.DEFINE_string("distribution", "none", "backend")
flags.DEFINE_bool("ps_sync", False, "synchronous parameter servers")
flags.DEFINE_string("model_dir", None, "shared checkpoint directory")
flags.DEFINE_string("out_dir", None, "where the results go")
flags.DEFINE_integer("steps", 200, "updates")
flags.DEFINE_integer("global_batch_size", 256, "examples per update")
flags.DEFINE_integer("train_examples", 20000, "generated training examples")
FLAGS = flags.FLAGS


def _arrays(split, count=None):
  """(features, labels) of the click logs as the model's columns take
  them: a missing count as its default 0, a missing id as -1 (dropped)."""
  features, labels, _ = click_data.generate(split, 0, count)
  columns = {name: np.nan_to_num(features[name], nan=0.0)[:, None]
             for name in click_data.NUMERIC}
  columns.update({name: features[name].astype(np.int64)[:, None]
                  for name in click_data.CATEGORICAL})
  return columns, labels


def _read(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def _alive(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  return True


def _wait_for_the_others_to_exit(workers, timeout=300):
  deadline = time.time() + timeout
  paths = [os.path.join(FLAGS.out_dir, f"result{i}.json")
           for i in range(1, workers)]
  while time.time() < deadline:
    if all(os.path.exists(path) for path in paths):
      if not any(_alive(_read(path)["pid"]) for path in paths):
        return
    time.sleep(0.2)
  raise TimeoutError("the other workers never exited")


class InformativeWideDeep(wide_deep.WideDeep):
  """The zoo's wide & deep over `click_columns.INFORMATIVE`."""

  name = None

  def logits(self, features, training, params):
    return wide_deep.logits(
        features, click_columns.reading(wide_deep.wide_columns(params)),
        click_columns.reading(wide_deep.deep_columns(params)),
        params["hidden_units"])


def main(argv):
  del argv
  config = es.TrainingConfig(optimizer="adagrad",
                             learning_rate=0.1)
  estimator = es.make_estimator(
      InformativeWideDeep(), model_dir=FLAGS.model_dir,
      distribution=FLAGS.distribution, training_config=config,
      ps_sync=FLAGS.ps_sync, random_seed=0, save_checkpoints_steps=1000)
  topology = estimator.topology
  features, labels = _arrays("train", FLAGS.train_examples)
  estimator.train(es.inputs.from_arrays(
      features, labels, FLAGS.global_batch_size, topology=topology, seed=0),
                  max_steps=FLAGS.steps)
  os.makedirs(FLAGS.out_dir, exist_ok=True)
  index = topology.worker_index
  with open(os.path.join(FLAGS.out_dir, f"result{index}.json"), "w",
            encoding="utf-8") as f:
    json.dump({"pid": os.getpid(), "last_step": estimator.last_step}, f)
  if not topology.is_chief:
    return
  _wait_for_the_others_to_exit(topology.num_workers)
  eval_features, eval_labels = _arrays("eval")
  scores = np.concatenate([batch["logistic"].reshape(-1) for batch in
                           estimator.predict(
                               es.inputs.from_arrays(eval_features,
                                                     eval_labels, 1000,
                                                     training=False),
                               yield_single_examples=False)])
  step = int(estimator.get_variable_value("global_step"))
  with open(os.path.join(FLAGS.out_dir, "score.json"), "w",
            encoding="utf-8") as f:
    json.dump({"auc": click_data.auc(eval_labels, scores), "global_step": step,
               "planted_auc": click_data.planted_auc()}, f)


if __name__ == "__main__":
  tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.WARN)
  app.run(main)

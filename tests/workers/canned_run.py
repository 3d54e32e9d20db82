"""A worker for the canned-estimator tests: a canned estimator trained
through `es.make_estimator` on any backend.

Cases: `wide_deep`, TF's DNNLinearCombinedClassifier on the generated click
logs (model_zoo.wide_deep over `click_columns.INFORMATIVE`); `linear`, a LinearClassifier with plain SGD on
a few examples in a fixed order, whose variables one process must match.

Every worker writes `<out_dir>/worker<index>.npz` with the values of all
global variables in its own session when training ends, and
`<out_dir>/result<index>.json` with what `evaluate` gave it; with
`--lr_scalings`, one process trains a model per rule, each under its own
`<out_dir>/<rule>`. `--score` (one process, after the job) writes
`<out_dir>/score.json`: the exact AUC of the latest checkpoint's predictions
on the click logs' eval split, scored alike for every backend;
`--then_score` has a one-process job write it instead of evaluating.
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

flags.DEFINE_string("case", "wide_deep", "wide_deep | linear")
flags.DEFINE_string("distribution", "none", "backend")
flags.DEFINE_bool("ps_sync", False, "synchronous parameter servers")
flags.DEFINE_string("model_dir", None, "shared checkpoint directory")
flags.DEFINE_string("out_dir", None, "where the results go")
flags.DEFINE_integer("steps", 300, "updates")
flags.DEFINE_integer("global_batch_size", 256, "examples per update")
flags.DEFINE_string("lr_scaling", "identity", "every optimizer's rule")
flags.DEFINE_list("lr_scalings", None,
                  "train one model per rule, in turn in this process, in "
                  "<out_dir>/<rule> and <model_dir>/<rule>")
flags.DEFINE_integer("accumulation_steps", 1,
                     "linear: micro-batches per update")
flags.DEFINE_float("learning_rate", 0.1, "linear: SGD's rate at S = 1")
flags.DEFINE_float("pause_per_update", 0.05,
                   "parameter_server: each trainer's pause before an update")
flags.DEFINE_bool("score", False, "score the latest checkpoint, train nothing")
flags.DEFINE_bool("then_score", False,
                  "one process: after training, score as --score does, in "
                  "this process instead of evaluating")
flags.DEFINE_bool("plain_optimizers", False,
                  "give the canned estimator its own optimizer names instead "
                  "of es.canned_optimizer (Horovod must refuse it)")
FLAGS = flags.FLAGS
ModeKeys = tf.estimator.ModeKeys


class HeldVariables(tf.compat.v1.train.SessionRunHook):
  """Saves the values of all global variables this worker's session holds,
  and counts the updates it ran."""

  def __init__(self, path):
    self._path = path
    self.updates = 0

  def begin(self):
    self._variables = {v.op.name: v for v in tf.compat.v1.global_variables()}

  def after_run(self, run_context, run_values):
    self.updates += 1

  def end(self, session):
    np.savez(self._path, **session.run(self._variables))


class JoinAll(tf.compat.v1.train.SessionRunHook):
  """Holds every trainer until all have a session, then paces them.

  parameter_server workers start training whenever their own session is
  ready, and a worker's comes tens of seconds after the chief's (it waits
  for the chief to initialise the variables); a short job would otherwise be
  trained by one trainer alone, on its shard alone. On a host with fewer
  cores than processes, one trainer can also starve the other; a pause per
  update (longer than an update takes) gives both their share.
  """

  def __init__(self, directory, index, count, pause):
    self._directory, self._index, self._count = directory, index, count
    self._pause = pause

  def before_run(self, run_context):
    time.sleep(self._pause)

  def after_create_session(self, session, coord):
    open(os.path.join(self._directory, f"joined{self._index}"), "w").close()
    deadline = time.time() + 300
    while len([name for name in os.listdir(self._directory)
               if name.startswith("joined")]) < self._count:
      if time.time() > deadline:
        raise TimeoutError("the other trainers never started")
      time.sleep(0.1)


def _estimator(scale_config):
  if FLAGS.case == "linear":
    return tf.estimator.LinearClassifier(
        [tf.feature_column.numeric_column("x", [4]),
         tf.feature_column.categorical_column_with_hash_bucket(
             "c", 8, dtype=tf.int64)],
        optimizer=es.canned_optimizer(
            tf.keras.optimizers.legacy.SGD(FLAGS.learning_rate), scale_config,
            accumulation_steps=FLAGS.accumulation_steps,
            lr_scaling=FLAGS.lr_scaling),
        config=scale_config.run_config)
  params = wide_deep.DEFAULT_HPARAMS
  wide = click_columns.reading(wide_deep.wide_columns(params))
  deep = click_columns.reading(wide_deep.deep_columns(params))
  if not FLAGS.plain_optimizers:
    return wide_deep.canned(scale_config, wide, deep, params["hidden_units"],
                            0.5, 0.5, FLAGS.lr_scaling)
  return tf.estimator.DNNLinearCombinedClassifier(
      linear_feature_columns=wide, dnn_feature_columns=deep,
      dnn_hidden_units=params["hidden_units"], config=scale_config.run_config)



def _linear_data(topology, global_batch_size):
  """64 examples; ids repeat within a batch (sparse gradient rows merge)."""
  rng = np.random.RandomState(0)
  x = rng.standard_normal((64, 4)).astype(np.float32)
  c = rng.randint(0, 5, (64, 1)).astype(np.int64)
  y = (x[:, 0] + (c[:, 0] % 2) > 0.5).astype(np.int64)
  train = es.inputs.from_arrays({"x": x, "c": c}, y, global_batch_size,
                                topology=topology, seed=None,
                                accumulation_steps=FLAGS.accumulation_steps)
  return train, es.inputs.from_arrays({"x": x, "c": c}, y, 64,
                                      training=False)


def _score(estimator, model, params):
  evaluation = model.input_fn(ModeKeys.EVAL, 500, params)
  labels = np.concatenate([batch.numpy() for _, batch in evaluation()])
  scores = np.concatenate([p["logistic"] for p in estimator.predict(
      evaluation, predict_keys=["logistic"], yield_single_examples=False)])
  return {"auc": click_data.auc(labels, scores.reshape(-1)),
          "planted_auc": click_data.planted_auc(params["data_seed"]),
          "global_step": int(estimator.get_variable_value("global_step"))}


def _write_score(estimator, model, params):
  with open(os.path.join(FLAGS.out_dir, "score.json"), "w",
            encoding="utf-8") as f:
    json.dump(_score(estimator, model, params), f)


def main(argv):
  del argv
  if not FLAGS.lr_scalings:
    _train()
    return
  out_dir, model_dir = FLAGS.out_dir, FLAGS.model_dir
  for rule in FLAGS.lr_scalings:
    FLAGS.lr_scaling = rule
    FLAGS.out_dir = os.path.join(out_dir, rule)
    FLAGS.model_dir = os.path.join(model_dir, rule)
    _train()


def _train():
  """One job's model: trained, then evaluated or scored (or only scored)."""
  scale_config = es.build_run_config(
      FLAGS.distribution, model_dir=FLAGS.model_dir, random_seed=0,
      save_checkpoints_steps=1000, ps_sync=FLAGS.ps_sync)
  estimator = es.make_estimator(_estimator(scale_config),
                                scale_config=scale_config)
  model = wide_deep.WideDeep()
  params = model.default_hparams()
  os.makedirs(FLAGS.out_dir, exist_ok=True)
  if FLAGS.score:
    _write_score(estimator, model, params)
    return
  topology = scale_config.topology
  index = topology.worker_index
  if FLAGS.case == "linear":
    train, evaluation = _linear_data(topology, FLAGS.global_batch_size)
  else:
    train = model.input_fn(ModeKeys.TRAIN, FLAGS.global_batch_size, params,
                           topology)
    evaluation = model.input_fn(ModeKeys.EVAL, 500, params)
  held = HeldVariables(os.path.join(FLAGS.out_dir, f"worker{index}.npz"))
  hooks = [held]
  if not topology.synchronous:
    hooks.append(JoinAll(FLAGS.out_dir, index, topology.num_workers,
                         FLAGS.pause_per_update))
  estimator.train(train, max_steps=FLAGS.steps, hooks=hooks)
  if FLAGS.then_score:
    if topology.num_workers != 1:
      raise ValueError("--then_score scores in one process only")
    _write_score(estimator, model, params)
    return
  metrics = estimator.evaluate(evaluation)
  with open(os.path.join(FLAGS.out_dir, f"result{index}.json"), "w",
            encoding="utf-8") as f:
    json.dump({"auc": float(metrics["auc"]),
               "global_step": int(metrics["global_step"]),
               "updates": held.updates,
               "workers": topology.num_workers}, f)


if __name__ == "__main__":
  app.run(main)

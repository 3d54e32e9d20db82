"""A worker for the multi-process tests: trains a tiny model, dumps what it holds.

Every worker writes `<out_dir>/worker<index>.npz` with the values of all
global variables *in its own session* (every replica's copy for mirrored
variables), and the example ids it read, so tests compare workers and
backends on what they really computed; its result JSON has the steps its
saving listener saw saved (or why the backend refused it).

With --runs, one process trains several models in turn, each with its own
flags, in `<out_dir>/<i>` and `<model_dir>/<i>`: cases that differ only in
their flags then pay for one process start (and one rendezvous) instead of
one each.
"""
import json
import os
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

import estimator_scale as es
from tests.workers.tiny_models import SumLinear, generated_data

flags.DEFINE_string("distribution", "none", "backend")
flags.DEFINE_bool("ps_sync", False, "synchronous parameter servers")
flags.DEFINE_string("case", "mlp", "mlp | sum_linear | sum_linear_nobias | embedding")
flags.DEFINE_string("inputs", None, "JSON list of input rows (sum_linear cases)")
flags.DEFINE_integer("examples", 64, "generated examples (mlp, embedding)")
flags.DEFINE_integer("global_batch_size", 8, "")
flags.DEFINE_integer("steps", 20, "updates")
flags.DEFINE_integer("accumulation_steps", 1, "")
flags.DEFINE_string("optimizer", "sgd", "")
flags.DEFINE_float("learning_rate", 0.1, "")
flags.DEFINE_string("lr_scaling", "identity", "")
flags.DEFINE_float("batch_scale", None,
                   "S (default: gradient samples per update)")
flags.DEFINE_float("adascale_smoothing", None, "AdaScale's theta")
flags.DEFINE_string("adascale_parts", "all", "AdaScale's gains per part")
flags.DEFINE_float("cowclip_ratio", None, "CowClip's r")
flags.DEFINE_float("cowclip_min_norm", None, "CowClip's zeta")
flags.DEFINE_string("model_dir", None, "")
flags.DEFINE_string("out_dir", None, "")
flags.DEFINE_integer("save_checkpoints_steps", 1000, "")
flags.DEFINE_integer("uneven_extra_rank", -1,
                     "this rank's input is one batch longer and ends")
flags.DEFINE_float("sleep_per_step", 0.0, "slow steps down (signal tests)")
flags.DEFINE_string("export_dir", None, "")
flags.DEFINE_bool("evaluate", False, "")
flags.DEFINE_integer("rounds", 1, "train -> evaluate rounds of `steps` each")
flags.DEFINE_string("runs", None,
                    "JSON list of {flag: value}: one run each, in turn, with "
                    "those flags set (the others as given)")
FLAGS = flags.FLAGS


class SavedSteps(tf.estimator.CheckpointSaverListener):
  """The steps of the checkpoints this worker's listener saw saved."""

  def __init__(self):
    self.steps = []

  def after_save(self, session, global_step_value):
    self.steps.append(int(global_step_value))


class DumpHook(tf.compat.v1.train.SessionRunHook):
  """Saves this worker's variables (and ids read) when training ends."""

  def __init__(self, path):
    self._path = path
    self.seen = []

  def begin(self):
    ids = tf.compat.v1.get_collection("example_ids")
    self._ids = ids or None
    self._vars = {}
    for v in tf.compat.v1.global_variables():
      parts = getattr(v, "values", None) or (v,)
      for i, part in enumerate(parts):
        self._vars[f"{v.op.name}@{i}"] = part

  def after_create_session(self, session, coord):
    self.first_step = int(session.run(tf.compat.v1.train.get_global_step()))
    # Written then renamed, so a test polling for the file never reads it empty.
    with open(self._path + ".pid.tmp", "w") as f:
      f.write(str(os.getpid()))
    os.replace(self._path + ".pid.tmp", self._path + ".pid")

  def before_run(self, run_context):
    if FLAGS.sleep_per_step:
      time.sleep(FLAGS.sleep_per_step)
    if self._ids is not None:
      return tf.compat.v1.train.SessionRunArgs(self._ids)

  def after_run(self, run_context, run_values):
    if self._ids is not None:
      for batch in run_values.results:
        self.seen.extend(np.asarray(batch).reshape(-1).tolist())

  def end(self, session):
    values = session.run(self._vars)
    values["__ids__"] = np.array(self.seen, np.int64)
    np.savez(self._path, **values)


def _data():
  if FLAGS.case.startswith("sum_linear"):
    x = np.array(json.loads(FLAGS.inputs), np.float32)
    features = {"x": x, "id": np.arange(len(x))}
    return (SumLinear(x.shape[1], FLAGS.case == "sum_linear"), features,
            np.zeros(len(x), np.int64))
  return generated_data(FLAGS.case, FLAGS.examples)


def _train():
  """One run of the flags as they are set now."""
  model, features, labels = _data()
  config = es.TrainingConfig(
      optimizer=FLAGS.optimizer,
      learning_rate=FLAGS.learning_rate,
      accumulation_steps=FLAGS.accumulation_steps,
      lr_scaling=FLAGS.lr_scaling, batch_scale=FLAGS.batch_scale,
      adascale_smoothing=FLAGS.adascale_smoothing,
      adascale_parts=FLAGS.adascale_parts,
      cowclip_ratio=FLAGS.cowclip_ratio,
      cowclip_min_norm=FLAGS.cowclip_min_norm)
  estimator = es.make_estimator(
      model, model_dir=FLAGS.model_dir, distribution=FLAGS.distribution,
      training_config=config, ps_sync=FLAGS.ps_sync,
      save_checkpoints_steps=FLAGS.save_checkpoints_steps, random_seed=0)
  topology = estimator.topology
  if FLAGS.uneven_extra_rank == topology.worker_index:
    per = topology.replica_batch_size(FLAGS.global_batch_size)
    count = per * (FLAGS.steps // 2 + 1)
    data = {k: v[:count] for k, v in features.items()}
    input_fn = lambda params=None, input_context=None: tf.data.Dataset.from_tensor_slices(
        (data, labels[:count])).batch(per, drop_remainder=True)
  else:
    input_fn = es.inputs.from_arrays(
        features, labels, FLAGS.global_batch_size, topology=topology,
        accumulation_steps=FLAGS.accumulation_steps, seed=None)
  os.makedirs(FLAGS.out_dir, exist_ok=True)
  dump = DumpHook(os.path.join(FLAGS.out_dir,
                               f"worker{topology.worker_index}.npz"))
  for round_ in range(1, FLAGS.rounds):
    estimator.train(input_fn, steps=FLAGS.steps)
    estimator.evaluate(es.inputs.from_arrays(features, labels, 16,
                                             training=False))
  saved, refused = SavedSteps(), None
  if topology.backend.listeners_refusal:
    try:
      estimator.train(input_fn, max_steps=1, saving_listeners=[saved])
    except es.errors.ConfigError as e:
      refused, saved = str(e), None
  estimator.train(input_fn, hooks=[dump], max_steps=FLAGS.steps * FLAGS.rounds,
                  saving_listeners=saved and [saved])
  result = {"last_step": estimator.last_step,
            "saved_steps": saved and saved.steps, "listeners_refused": refused,
            "first_step": getattr(dump, "first_step", None),
            "stopped_by_signal": estimator.stopped_by_signal,
            "cores": sorted(os.sched_getaffinity(0))}
  if FLAGS.evaluate:
    eval_fn = es.inputs.from_arrays(features, labels, 16, training=False)
    result["eval"] = {k: float(v) for k, v in
                      estimator.evaluate(eval_fn).items()}
  if FLAGS.export_dir:
    result["export"] = os.fsdecode(estimator.export_saved_model(
        FLAGS.export_dir))
  with open(os.path.join(FLAGS.out_dir,
                         f"result{topology.worker_index}.json"), "w") as f:
    json.dump(result, f)


def _runs(text):
  """[{flag: value}] of --runs; ValueError naming what is wrong."""
  runs = json.loads(text)
  if not isinstance(runs, list) or not runs or not all(
      isinstance(run, dict) for run in runs):
    raise ValueError(f"--runs={text!r}: expected a JSON list of "
                     "{flag: value} objects, at least one")
  for run in runs:
    for name in run:
      if name in ("runs", "out_dir", "model_dir") or name not in FLAGS:
        raise ValueError(f"--runs: {name!r} is not a flag a run may set")
  mirrored = [run.get("distribution", FLAGS.distribution) == "mirrored"
              for run in runs]
  if mirrored != sorted(mirrored, reverse=True):
    # Once a process has trained on one device, MirroredStrategy fails to
    # place its second CPU replica there.
    raise ValueError(f"--runs={text!r}: the distribution=mirrored runs "
                     "must come before every other")
  return runs


def main(argv):
  del argv
  if FLAGS.runs is None:
    _train()
    return
  runs = _runs(FLAGS.runs)
  given = {name: FLAGS[name].value for run in runs for name in run}
  out_dir, model_dir = FLAGS.out_dir, FLAGS.model_dir
  for i, run in enumerate(runs):
    for name, value in dict(given, **run).items():
      FLAGS[name].value = value
    FLAGS.out_dir = os.path.join(out_dir, str(i))
    FLAGS.model_dir = model_dir and os.path.join(model_dir, str(i))
    _train()


if __name__ == "__main__":
  app.run(main)

"""Trains the AdaScale study's runs in TensorFlow: one spec (specs.py) a call.

A run trains its segments one after another in a fresh temporary
model_dir, continuing from the previous segment's checkpoint, and is then
evaluated on the test and training splits. A rank-elastic segment is a
horovodrun job of its own (`python -m tools.study --segment`).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

# TensorFlow reads it as it loads: its C++ log lines would bury the
# study's progress lines.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import logging
import tensorflow as tf

import estimator_scale as es
from estimator_scale import registry
from estimator_scale.backends import horovod
from model_zoo import digits_data
from tools import repo
from tools.study import specs
# pylint: enable=g-import-not-at-top,wrong-import-position


def quiet():
  """Keeps a pool worker's output to the study's own progress lines."""
  warnings.filterwarnings("ignore")
  logging.set_verbosity(logging.ERROR)
  tf.get_logger().setLevel("ERROR")


def _trace_hook(every, points):
  """A hook that appends AdaScale's (tau, gain) to `points` every `every`
  updates, and keeps the final global_step and tau.

  It reads in a session run of its own, after the update: a fetch in the
  update's own run may see the state from before or after the assigns.
  """

  class TraceHook(tf.compat.v1.train.SessionRunHook):

    def begin(self):
      variables = {v.op.name: v for v in tf.compat.v1.global_variables()}
      self._fetch = {"updates": tf.compat.v1.train.get_global_step()}
      for name, variable in (("gain", es.ADASCALE_GAIN),
                             ("progress", es.ADASCALE_PROGRESS)):
        if variable in variables:
          self._fetch[name] = variables[variable].read_value()
      self.final, self._runs = None, 0

    def after_run(self, run_context, run_values):
      self._runs += 1
      if "gain" in self._fetch and (self._runs - 1) % every == 0:
        state = run_context.session.run(self._fetch)
        points.append((float(state["progress"]), float(state["gain"])))

    def end(self, session):
      self.final = {k: float(v) for k, v in session.run(self._fetch).items()}
  return TraceHook()


def _train_split_input(batch_size):
  """One ordered pass over the training split, for the final training loss."""
  return es.inputs.from_tfrecords(
      digits_data.tfrecord_pattern("train"), digits_data.FEATURE_SPEC, "label",
      batch_size, training=False)


def _estimator(spec, segment, model_dir):
  """The Estimator of one segment, in `model_dir`."""
  config = es.TrainingConfig(
      optimizer=segment["optimizer"], **segment["schedule"],
      accumulation_steps=segment["accumulation_steps"],
      lr_scaling=segment["lr_scaling"],
      scaling_warmup_updates=segment["warmup"],
      adascale_smoothing=(spec["adascale_smoothing"]
                          if segment["lr_scaling"] == "adascale" else None),
      optimizer_options=tuple(tuple(o) for o in segment["optimizer_options"]))
  return es.make_estimator(
      registry.get(spec["model"]), model_dir=model_dir,
      distribution=segment["distribution"], training_config=config,
      hparams={"data_seed": spec["seed"]}, random_seed=spec["seed"],
      scale_invariant_steps=segment["tau"], intra_op_threads=spec["threads"],
      save_checkpoints_steps=specs.NEVER, save_summary_steps=specs.NEVER,
      log_step_count_steps=specs.NEVER)


def _train_segment(spec, segment, model_dir, points):
  """Trains one segment in `model_dir`, continuing from its checkpoint."""
  estimator = _estimator(spec, segment, model_dir)
  trace = _trace_hook(segment["trace_every"], points)
  estimator.train(
      estimator.model_input_fn(tf.estimator.ModeKeys.TRAIN,
                               spec["micro_batch_size"] * segment["scale"]),
      hooks=[trace], max_steps=segment["max_updates"])
  return estimator, trace.final


def _train_segment_on_ranks(spec, segment, model_dir, points):
  """Trains one segment as a horovodrun job of `segment["ranks"]` ranks on
  this host (`main` with --segment, on each rank); returns its final state.

  Each job starts from the previous one's checkpoint with its own number of
  ranks, as an elastic Horovod job does after a change, and its ranks share
  the segment's S. Rank 0 hands back the trace through a file.
  """
  job = os.path.join(model_dir, "segment.json")
  result = horovod_job("tools.study", job, segment["ranks"],
                       {"spec": spec, "segment": segment,
                        "model_dir": model_dir})
  points.extend(tuple(p) for p in result["points"])
  return result["final"]


def horovod_job(module, job, ranks, payload):
  """Writes `payload` to `job`, runs `python -m module --segment job` as a
  horovodrun job of `ranks` ranks on this host, and returns what its rank 0
  wrote to `job`.out; RuntimeError with the job's output when it fails."""
  with open(job, "w", encoding="utf-8") as f:
    json.dump(payload, f)
  horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
  proc = subprocess.run(
      [horovodrun, "--gloo", "-np", str(ranks), "-H", f"localhost:{ranks}",
       sys.executable, "-m", module, "--segment", job],
      cwd=repo.ROOT, capture_output=True, text=True, check=False)
  if proc.returncode != 0:
    raise RuntimeError(f"{module}: a segment on {ranks} ranks failed:\n"
                       f"{(proc.stdout + proc.stderr)[-4000:]}")
  with open(job + ".out", encoding="utf-8") as f:
    return json.load(f)


def train_segment_job(path):
  """One rank of `_train_segment_on_ranks`'s horovodrun job."""
  registry.load_module("model_zoo")
  quiet()
  with open(path, encoding="utf-8") as f:
    job = json.load(f)
  points = []
  estimator, final = _train_segment(job["spec"], job["segment"],
                                    job["model_dir"], points)
  if estimator.topology.is_chief:
    with open(path + ".out", "w", encoding="utf-8") as f:
      json.dump({"points": points, "final": final}, f)


def train_run(spec):
  """Trains and evaluates one run; returns its result (a plain dict)."""
  registry.load_module("model_zoo")
  quiet()
  model_dir = tempfile.mkdtemp(prefix="adascale-study-")
  points, wall = [], 0.0
  try:
    for segment in spec["segments"]:
      start = time.time()
      if segment.get("ranks"):
        final = _train_segment_on_ranks(spec, segment, model_dir, points)
        # Evaluated here, on one process, from the last job's checkpoint.
        estimator = _estimator(spec, dict(
            segment, distribution="none",
            accumulation_steps=segment["scale"]), model_dir)
      else:
        estimator, final = _train_segment(spec, segment, model_dir,
                                          points)
      wall += time.time() - start
    test = estimator.evaluate(
        estimator.model_input_fn(tf.estimator.ModeKeys.EVAL, 512))
    train = estimator.evaluate(_train_split_input(512), name="train")
  finally:
    shutil.rmtree(model_dir, ignore_errors=True)
  schedule = spec["segments"][0]["schedule"]
  return dict(
      model=spec["model"], method=spec["method"], scales=spec["scales"],
      ranks=spec["ranks"], seed=spec["seed"],
      accuracy=100.0 * float(test["accuracy"]),
      test_loss=float(test["loss"]), train_loss=float(train["loss"]),
      updates=int(final["updates"]), tau=final.get("progress"),
      wall_seconds=wall,
      trace=[(tau, gain, specs.adascale_lr(
          gain, tau, schedule["learning_rate"],
          schedule.get("lr_boundaries", ()),
          schedule.get("lr_decay_rate", 1.0))) for tau, gain in points])


def horovod_topology():
  """(ranks, is_chief) when horovodrun started us, else (1, True)."""
  if not horovod.launched():
    return 1, True
  hvd = horovod.import_horovod()
  hvd.init()
  return hvd.size(), hvd.rank() == 0



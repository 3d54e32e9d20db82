"""Trains the click study's runs in TensorFlow: one spec (click_specs) a call.

A run trains its segments one after another in a fresh temporary
model_dir, each continuing from the previous one's checkpoint; a segment on
more than one rank is a horovodrun job of its own (`python -m
tools.study.click --segment`). One process then evaluates the last
checkpoint on the held-out split, and a timed run every checkpoint it
kept, so each run is scored alike whatever trained it.
"""
import json
import os
import shutil
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf

import estimator_scale as es
from estimator_scale import registry
from tools.study import click_specs
from tools.study import runs
# pylint: enable=g-import-not-at-top,wrong-import-position

EVAL_BATCH = 1024


class _Clock(tf.compat.v1.train.SessionRunHook):
  """Seconds since the train() call at every `every`-th update (when the
  checkpoint saver saves) and at the end, and the trainable bytes (what an
  allreduce of dense gradients sends), for time to AUC; at each save, the
  disk the checkpoints still to come will need (a run with a curve keeps
  every one, from step 0 to `max_updates`)."""

  def __init__(self, started, every, model_dir, max_updates):
    self.started, self.every, self.saves = started, every, []
    self.model_dir = model_dir
    self.kept = every and min(_KEEP_MAX, -(-max_updates // every) + 1)
    self.trainable_bytes = 0

  def begin(self):
    self.trainable_bytes = sum(
        v.shape.num_elements() * v.dtype.size
        for v in tf.compat.v1.trainable_variables())
    self._step = tf.compat.v1.train.get_global_step()

  def before_run(self, run_context):
    return tf.compat.v1.train.SessionRunArgs(self._step)

  def after_run(self, run_context, run_values):
    # The fetch is the step before this update; the saver sees it after.
    step = int(run_values.results) + 1
    if self.every and step % self.every == 0:
      self.saves.append((step, time.time() - self.started))
      check_disk(self.model_dir, self.kept - len(self.saves))

  def end(self, session):
    step = int(session.run(self._step))
    if not self.saves or self.saves[-1][0] != step:
      self.saves.append((step, time.time() - self.started))


_KEEP_MAX = 4 * click_specs.TIME_CHECKPOINTS
"""Checkpoints a timed run keeps for its curve, at most."""


_runs_at_once = 1


def start_worker(runs_at_once):
  """A pool worker's initializer: quiet, and how many runs share the disk."""
  global _runs_at_once  # pylint: disable=global-statement
  _runs_at_once = runs_at_once
  runs.quiet()


def check_disk(model_dir, to_come):
  """Fails a run at a checkpoint when the `to_come` more it will keep (every
  one, for the curve) would not fit in its share of the free disk: a full
  disk would fail it later, and everything else writing there with it. A
  checkpoint grows as dynamic tables meet new ids, so every save is checked."""
  prefix = tf.train.latest_checkpoint(model_dir)
  if prefix is None:
    return
  size = sum(os.path.getsize(p) for p in tf.io.gfile.glob(prefix + ".*"))
  share = shutil.disk_usage(model_dir).free / _runs_at_once
  if size * to_come > share:
    raise RuntimeError(
        f"{model_dir}: this run keeps {to_come} more checkpoints of "
        f"{size / 2**30:.2f} GiB or more for its curve, and its share of "
        f"the free disk ({_runs_at_once} runs at once) is "
        f"{share / 2**30:.1f} GiB; free the disk or run fewer runs at once "
        "(--processes)")


def _estimator(spec, segment, model_dir, distributed):
  config = es.TrainingConfig(
      optimizer=segment["optimizer"],
      linear_optimizer=segment.get("linear_optimizer"),
      **segment["schedule"],
      accumulation_steps=(segment["accumulation_steps"] if distributed
                          else segment["scale"]),
      lr_scaling=segment["lr_scaling"],
      adascale_parts=segment.get("adascale_parts", "all"),
      scaling_warmup_updates=segment["warmup"],
      optimizer_options=tuple(tuple(o) for o in segment["optimizer_options"]))
  every = segment["checkpoint_every"]
  return es.make_estimator(
      registry.get(spec["model"]), model_dir=model_dir,
      hparams=spec.get("hparams", ""),
      distribution="horovod" if distributed else "none",
      training_config=config, random_seed=spec["seed"],
      scale_invariant_steps=segment["tau"], intra_op_threads=spec["threads"],
      save_checkpoints_steps=every or click_specs.NEVER,
      keep_checkpoint_max=(_KEEP_MAX if every else 2),
      save_summary_steps=click_specs.NEVER,
      log_step_count_steps=click_specs.NEVER)


def _final_state(estimator):
  names = set(estimator.get_variable_names())
  state = {"updates": int(estimator.get_variable_value("global_step"))}
  if es.ADASCALE_PROGRESS in names:
    state["progress"] = float(
        estimator.get_variable_value(es.ADASCALE_PROGRESS))
  return state


def _train_segment(spec, segment, model_dir, distributed):
  """Trains one segment in this process (one rank of a job when
  `distributed`); the chief's checkpoint clock, or None."""
  estimator = _estimator(spec, segment, model_dir, distributed)
  clock = _Clock(time.time(), segment["checkpoint_every"], model_dir,
                 segment["max_updates"])
  estimator.train(
      estimator.model_input_fn(tf.estimator.ModeKeys.TRAIN,
                               spec["micro_batch_size"] * segment["scale"]),
      hooks=[clock], max_steps=segment["max_updates"])
  return estimator, clock if estimator.topology.is_chief else None


def _train_on_ranks(spec, segment, model_dir):
  """A horovodrun job of `segment["ranks"]` ranks on this host; returns
  rank 0's clock as a dict."""
  job = os.path.join(model_dir, f"segment-{len(os.listdir(model_dir))}.json")
  return runs.horovod_job("tools.study.click", job, segment["ranks"],
                          {"spec": spec, "segment": segment,
                           "model_dir": model_dir})


def train_segment_job(path):
  """One rank of `_train_on_ranks`'s job; rank 0 writes its clock."""
  registry.load_module("model_zoo")
  runs.quiet()
  with open(path, encoding="utf-8") as f:
    job = json.load(f)
  _, clock = _train_segment(job["spec"], job["segment"], job["model_dir"],
                            distributed=True)
  if clock is not None:
    with open(path + ".out", "w", encoding="utf-8") as f:
      json.dump({"saves": clock.saves,
                 "trainable_bytes": clock.trainable_bytes}, f)


def _evaluate(estimator, checkpoint=None):
  result = estimator.evaluate(
      estimator.model_input_fn(tf.estimator.ModeKeys.EVAL, EVAL_BATCH),
      checkpoint_path=checkpoint)
  return float(result["auc"]), float(result["loss"])


def _curve(estimator, model_dir, saves):
  """(updates, seconds, AUC) at every checkpoint still on disk."""
  kept = tf.train.get_checkpoint_state(model_dir).all_model_checkpoint_paths
  seconds = {}
  for step, at in saves:  # a resumed job saves its start step again
    seconds.setdefault(step, at)
  curve = []
  for path in kept:
    step = int(path.rsplit("-", 1)[1])
    if step in seconds and step > 0:
      curve.append((step, round(seconds[step], 3),
                    round(_evaluate(estimator, path)[0], 6)))
  return sorted(curve)


def train_run(spec):
  """Trains and evaluates one run; returns its result (a plain dict)."""
  registry.load_module("model_zoo")
  runs.quiet()
  model_dir = tempfile.mkdtemp(prefix="click-study-")
  wall, saves, offset, trainable_bytes, micro_batches = 0.0, [], 0.0, 0, 0
  try:
    for segment in spec["segments"]:
      start = time.time()
      if segment["ranks"] > 1:
        clock = _train_on_ranks(spec, segment, model_dir)
        segment_saves = clock["saves"]
        trainable_bytes = clock["trainable_bytes"]
      else:
        _, clock = _train_segment(spec, segment, model_dir, False)
        segment_saves, trainable_bytes = clock.saves, clock.trainable_bytes
      done = saves[-1][0] if saves else 0
      micro_batches += (segment_saves[-1][0] - done) * segment["scale"]
      saves += [(step, offset + t) for step, t in segment_saves]
      wall += time.time() - start
      offset = wall
    # One process scores every run, from the last job's checkpoint.
    estimator = _estimator(spec, spec["segments"][-1], model_dir, False)
    auc, loss = _evaluate(estimator)
    state = _final_state(estimator)
    curve = _curve(estimator, model_dir, saves) if spec["timed"] else []
  finally:
    shutil.rmtree(model_dir, ignore_errors=True)
  return dict(
      model=spec["model"], optimizer=spec["optimizer"],
      method=spec["method"], scales=spec["scales"], ranks=spec["ranks"],
      seed=spec["seed"], timed=spec["timed"], auc=auc, loss=loss,
      updates=state["updates"], tau=state.get("progress"),
      micro_batches=micro_batches,
      wall_seconds=round(wall, 3), curve=curve,
      trainable_bytes=trainable_bytes)


"""The `train` command (the default): trains, evaluates, exports and writes
the run's summary, through an elastic Horovod job's changes of size too."""
import os
import sys
import time

from absl import app
from absl import logging

import estimator_scale as es
from estimator_scale import backends
from estimator_scale import filesystems
from estimator_scale.backends import cluster_exit
from estimator_scale.backends import coordinator
from estimator_scale.backends.horovod import elastic
from estimator_scale.cli import days
from estimator_scale.cli import estimators
from estimator_scale.cli import evaluation
from estimator_scale.cli import flags
from estimator_scale.cli import logs

FLAGS = flags.FLAGS


def _summary(estimator, metrics, wall_seconds, examples_per_sec,
             global_batch_size):
  names = set(estimator.get_variable_names())
  summary = {
      "model": FLAGS.model, "distribution": FLAGS.distribution,
      "workers": estimator.topology.num_workers,
      "replicas": estimator.topology.num_replicas,
      "global_batch_size": global_batch_size,
      "accumulation_steps": estimator.training_config.accumulation_steps,
      "lr_scaling": FLAGS.lr_scaling,
      "global_step": int(estimator.get_variable_value("global_step")),
      "examples_per_sec": examples_per_sec, "wall_seconds": wall_seconds,
      "eval": {k: float(v) for k, v in metrics.items()},
  }
  if es.ADASCALE_PROGRESS in names:
    summary["adascale_progress"] = float(
        estimator.get_variable_value(es.ADASCALE_PROGRESS))
    summary["adascale_gain"] = float(
        estimator.get_variable_value(es.ADASCALE_GAIN))
    summary["updates"] = summary["global_step"]
  return summary


def _elastic():
  """Whether this is a rank of an elastic job; refuses the elastic flags
  anywhere else, where they would change nothing."""
  if backends.get(FLAGS.distribution).elastic_requested():
    if FLAGS["save_checkpoints_steps"].present:
      raise app.UsageError(
          "--save_checkpoints_steps does not apply to an elastic Horovod "
          "job: its checkpoints are its commits, every "
          "--commit_every_n_steps updates")
    return True
  for name in flags.ELASTIC_FLAGS:
    if FLAGS[name].present:
      raise app.UsageError(
          f"--{name} applies to elastic Horovod jobs only: horovodrun "
          "--min-np N --max-np M --host-discovery-script SCRIPT python -m "
          "estimator_scale.cli --distribution=horovod ...")
  return False


def _train(batch=None):
  """(estimator, metrics, seconds, global batch size) of training and
  evaluating as the flags say; `batch` (an elastic.Batch) replaces the batch
  flags."""
  if batch:  # an elastic attempt, whose rank 0 may be this process now
    logs.configure(elastic.attempting().rank == 0)
  estimator = estimators.estimator(estimators.registered_model(), batch)
  logs.configure(estimator.topology.is_chief)
  train_input, eval_input = evaluation.input_fns(
      estimator, batch and batch.global_batch_size)
  train_spec, eval_spec, every = evaluation.specs(estimator, train_input,
                                                  eval_input)
  start = time.time()
  metrics, _ = es.train_and_evaluate(estimator, train_spec, eval_spec,
                                     eval_every_n_steps=every)
  return (estimator, metrics, time.time() - start,
          batch.global_batch_size if batch else FLAGS.global_batch_size)


def run_training():
  """Trains, evaluates, exports and summarises as the flags say, then
  leaves once the job's other tasks are done too (`cluster_exit`)."""
  _run_training()
  if cluster_exit.leave_in_order():
    filesystems.exit_process(0)


def _run_training():
  days.check_flags()
  if FLAGS.days:
    if days.run_days():
      sys.exit(coordinator.EXIT_STOPPED_BY_SIGNAL)
    return
  if _elastic():
    estimator, metrics, wall, global_batch_size = elastic.run(
        _train, FLAGS.global_batch_size, FLAGS.accumulation_steps,
        FLAGS.elastic_batch, FLAGS.commit_every_n_steps,
        FLAGS.intra_op_threads)
  else:
    estimator, metrics, wall, global_batch_size = _train()
  if estimator.stopped_by_signal:
    logging.warning("stopped by a signal at step %s; checkpoint written by "
                    "the chief, skipping evaluation; exit %d: not finished, "
                    "the same command goes on from there",
                    estimator.last_step, coordinator.EXIT_STOPPED_BY_SIGNAL)
    sys.exit(coordinator.EXIT_STOPPED_BY_SIGNAL)
  if FLAGS.export_dir:
    path = estimator.export_saved_model(FLAGS.export_dir,
                                        compact=flags.compact_export())
    logging.info("exported SavedModel to %s", os.fsdecode(path))
  if not estimator.topology.is_chief:
    return
  progress = estimator.progress
  speed = progress.examples_per_sec if progress else None
  if speed is None and wall > 0:
    speed = (estimator.topology.examples_per_update(global_batch_size) *
             (estimator.last_step or 0) / wall)
  summary = _summary(estimator, metrics, wall, speed, global_batch_size)
  summary["evaluations"] = [{k: float(v) for k, v in e.items()}
                            for e in estimator.evaluations]
  if progress:
    summary["input_wait"] = progress.input_wait_summary()
  print("final eval: " + ", ".join(f"{k}={v:.4f}" for k, v in
                                   sorted(summary["eval"].items())))
  if FLAGS.summary_json:
    estimators.write_summary(summary)

"""The command line: `estimator-scale train ...` / `python -m estimator_scale.train ...`.

Trains a registered model (or one from --model_module) with evaluations
(at the end, or every --eval_every_n_steps / --eval_every_secs), optionally
exports the best and the final SavedModel, and writes a JSON summary.
`estimator-scale evaluate` and `estimator-scale export` evaluate or export
the latest (or --checkpoint) checkpoint in --model_dir without training;
`estimator-scale models` lists the registered models.

Exit codes: 0 done; 2 a flag or configuration the framework rejects (one
line on stderr); 1 an exception from the model's code or from TensorFlow
at run time (its traceback, naming the model method that was running).
"""
import json
import os
import re
import sys
import time

from absl import app
from absl import flags
from absl import logging

from estimator_scale import cli_evaluation
from estimator_scale import errors
from estimator_scale import filesystems
from estimator_scale import logs
from estimator_scale import backends
from estimator_scale.backends.horovod import elastic
from estimator_scale.train_ops import optimizers
from estimator_scale.train_ops import precision
from estimator_scale.train_ops import scaling
from estimator_scale.train_ops import schedules

FLAGS = flags.FLAGS

flags.DEFINE_string("model", "digits_cnn", "Registered model name.")
flags.DEFINE_string("model_module", None,
                    "Python module to import first; it registers your models.")
flags.DEFINE_string("model_dir", None,
                    "Checkpoint directory (default: a new temporary "
                    "directory). TF_CONFIG workers must share it: a shared "
                    "file system, s3:// or gs://; Horovod reads rank 0's.")
flags.DEFINE_integer("global_batch_size", 64,
                     "Examples per update, summed over all workers.",
                     lower_bound=1)
flags.DEFINE_integer("train_steps", 1000, "Updates to train (from step 0).",
                     lower_bound=1)
flags.DEFINE_integer("eval_steps", None,
                     "Evaluation batches (default: the whole eval set).",
                     lower_bound=1)
flags.DEFINE_enum("optimizer", "momentum", tuple(optimizers.OPTIMIZERS),
                  "The optimizer; the flags below set the options it takes.")
flags.DEFINE_float("learning_rate", 0.05, "Base (S = 1) learning rate.")
flags.DEFINE_float("momentum", 0.9, "Momentum of `momentum` and `lars`.")
flags.DEFINE_float("weight_decay", None,
                   "Weight decay of `adamw`, `lamb` (decoupled) and `lars` "
                   "(unset: each one's default, 0.01 for adamw and lamb, "
                   "1e-4 for lars).")
flags.DEFINE_float("trust_coefficient", 0.001,
                   "LARS's trust coefficient eta.")
flags.DEFINE_enum("lr_schedule", "constant", schedules.SCHEDULES,
                  "How the base rate decays over the updates.")
flags.DEFINE_list("lr_boundaries", [], "`piecewise` decay steps.")
flags.DEFINE_float("lr_decay_rate", 0.1, "`piecewise` factor per boundary.")
flags.DEFINE_integer("lr_decay_steps", 0, "`cosine`/`polynomial` length.")
flags.DEFINE_integer("warmup_steps", 0, "Linear warm-up of the base rate.")
flags.DEFINE_string("hparams", "", "Model hyperparameters: a=1,b=0.5.")
flags.DEFINE_enum("distribution", "none", backends.NAMES,
                  "How the job runs.")
flags.DEFINE_integer("replicas", None, "`mirrored` replicas in this process.")
flags.DEFINE_integer("accumulation_steps", 1, "Micro-batches per update.")
flags.DEFINE_enum("lr_scaling", "identity", scaling.RULES,
                  "How the learning rate grows with the scale S.")
flags.DEFINE_float("scale", None,
                   "S; default workers x replicas x accumulation_steps.")
flags.DEFINE_integer("scaling_warmup_updates", 0,
                     "`linear` scaling's warm-up, in updates.")
flags.DEFINE_float("scale_invariant_steps", None,
                   "Stop when AdaScale's progress tau reaches this.")
flags.DEFINE_float("adascale_smoothing", None,
                   "AdaScale's moving-average factor in [0, 1); default "
                   "max(1 - n/1000, 0), n = gradient samples per update. "
                   "Lower it for runs of few updates.")
flags.DEFINE_enum("precision", "float32", precision.PRECISIONS,
                  "The network's compute type; variables and the optimizer "
                  "stay float32; mixed_float16 adds dynamic loss scaling.")
flags.DEFINE_enum("allreduce_compression", "none", backends.COMPRESSIONS,
                  "16-bit gradients on the wire of the allreduce "
                  "(--distribution=horovod).")
flags.DEFINE_enum("sparse_exchange", "auto", backends.SPARSE_EXCHANGES,
                  "How Horovod exchanges sparse (embedding) gradients: as "
                  "the rows touched, as a dense table, or chosen per update "
                  "by how many rows the ranks touch.")
flags.DEFINE_string("export_dir", None, "Export a SavedModel under here.")
flags.DEFINE_string("checkpoint", None,
                    "evaluate/export: this checkpoint (a path or a name in "
                    "--model_dir) instead of the latest.")
flags.DEFINE_string("summary_json", None, "Write the run summary here.")
flags.DEFINE_integer("save_checkpoints_steps", 500, "Checkpoint interval.",
                     lower_bound=1)
flags.DEFINE_integer("log_every_n_steps", 100, "Progress line interval.",
                     lower_bound=1)
flags.DEFINE_integer("commit_every_n_steps", elastic.COMMIT_EVERY_N_STEPS,
                     "Elastic Horovod: updates between commits (rank 0's "
                     "checkpoints), the work a lost rank may cost.",
                     lower_bound=1)
flags.DEFINE_enum("elastic_batch", "scale", elastic.BATCH_POLICIES,
                  "Elastic Horovod, when the ranks change: `scale` keeps "
                  "each rank's batch, so the global batch and S follow the "
                  "size (with AdaScale its gain follows S); `hold` keeps "
                  "the global batch by changing --accumulation_steps.")
flags.DEFINE_integer("random_seed", 0, "Graph-level random seed.")
flags.DEFINE_integer("intra_op_threads", None,
                     "Threads per op (default: cores, / ranks per host).",
                     lower_bound=1)


def training_config_from_flags(accumulation_steps=None):
  """The `TrainingConfig` the flags describe (another accumulation_steps:
  an elastic job's at its current size)."""
  import estimator_scale as es  # pylint: disable=g-import-not-at-top
  try:
    boundaries = tuple(int(b) for b in FLAGS.lr_boundaries)
  except ValueError:
    raise app.UsageError("--lr_boundaries must be integers, got "
                         f"{FLAGS.lr_boundaries}") from None
  schedule = es.Schedule(
      name=FLAGS.lr_schedule, learning_rate=FLAGS.learning_rate,
      boundaries=boundaries, decay_rate=FLAGS.lr_decay_rate,
      decay_steps=FLAGS.lr_decay_steps, warmup_steps=FLAGS.warmup_steps)
  return es.TrainingConfig(
      optimizer=FLAGS.optimizer, schedule=schedule,
      accumulation_steps=accumulation_steps or FLAGS.accumulation_steps,
      lr_scaling=FLAGS.lr_scaling, scale=FLAGS.scale,
      scaling_warmup_updates=FLAGS.scaling_warmup_updates,
      adascale_smoothing=FLAGS.adascale_smoothing,
      optimizer_options=_optimizer_options(),
      precision=FLAGS.precision,
      allreduce_compression=FLAGS.allreduce_compression,
      sparse_exchange=FLAGS.sparse_exchange)


_OPTION_FLAGS = ("momentum", "trust_coefficient", "weight_decay")
"""Flags named after the optimizer option they set."""


def _optimizer_options():
  """The option flags that --optimizer takes, as (name, value) pairs.

  The flags have defaults, so each goes only to the optimizers that take
  it; one typed for an optimizer that does not would change nothing, and
  is refused rather than ignored.
  """
  takes = optimizers.valid_options(FLAGS.optimizer)
  options = {}
  for name in _OPTION_FLAGS:
    if name in takes:
      if FLAGS[name].value is not None:
        options[name] = FLAGS[name].value
    elif FLAGS[name].present:
      usable = [f"--{flag}" for flag in _OPTION_FLAGS if flag in takes]
      raise app.UsageError(
          f"--{name} does not apply to --optimizer={FLAGS.optimizer} (its "
          f"option flags: {', '.join(usable) or 'none'})")
  return tuple(sorted(options.items()))


def _summary(estimator, metrics, wall_seconds, examples_per_sec,
             global_batch_size):
  import estimator_scale as es  # pylint: disable=g-import-not-at-top
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


def _load_models():
  """Registers the zoo's models and --model_module's; returns the registry.

  The framework does not import the zoo (the zoo imports the framework);
  the command line is where both meet.
  """
  from estimator_scale import registry  # pylint: disable=g-import-not-at-top
  registry.load_module("model_zoo")
  if FLAGS.model_module:
    registry.load_module(FLAGS.model_module)
  return registry


def _registered_model():
  return _load_models().get(FLAGS.model)


def _estimator(model, batch=None):
  """The Estimator the flags describe; `batch` (an elastic.Batch) replaces
  the batch flags."""
  import estimator_scale as es  # pylint: disable=g-import-not-at-top
  with errors.as_config_error():
    training_config = training_config_from_flags(
        batch and batch.accumulation_steps)
  return es.make_estimator(
      model, model_dir=FLAGS.model_dir, distribution=FLAGS.distribution,
      training_config=training_config, hparams=FLAGS.hparams,
      global_batch_size=(batch.global_batch_size if batch else
                         FLAGS.global_batch_size),
      progress_every_n_steps=FLAGS.log_every_n_steps,
      scale_invariant_steps=FLAGS.scale_invariant_steps,
      replicas=FLAGS.replicas, random_seed=FLAGS.random_seed,
      intra_op_threads=FLAGS.intra_op_threads,
      save_checkpoints_steps=FLAGS.save_checkpoints_steps,
      save_summary_steps=FLAGS.log_every_n_steps,
      log_step_count_steps=FLAGS.log_every_n_steps)


_ELASTIC_FLAGS = ("commit_every_n_steps", "elastic_batch")


def _elastic():
  """Whether this is a rank of an elastic Horovod job; refuses the elastic
  flags anywhere else, where they would change nothing."""
  if FLAGS.distribution == "horovod" and elastic.requested():
    if FLAGS["save_checkpoints_steps"].present:
      raise app.UsageError(
          "--save_checkpoints_steps does not apply to an elastic Horovod "
          "job: its checkpoints are its commits, every "
          "--commit_every_n_steps updates")
    return True
  for name in _ELASTIC_FLAGS:
    if FLAGS[name].present:
      raise app.UsageError(
          f"--{name} applies to elastic Horovod jobs only: horovodrun "
          "--min-np N --max-np M --host-discovery-script SCRIPT python -m "
          "estimator_scale.train --distribution=horovod ...")
  return False


def _train(batch=None):
  """(estimator, metrics, seconds, global batch size) of training and
  evaluating as the flags say; `batch` (an elastic.Batch) replaces the batch
  flags."""
  import estimator_scale as es  # pylint: disable=g-import-not-at-top
  estimator = _estimator(_registered_model(), batch)
  logs.configure(estimator.topology.is_chief)
  train_input, eval_input = cli_evaluation.input_fns(
      estimator, batch and batch.global_batch_size)
  train_spec, eval_spec, every = cli_evaluation.specs(estimator, train_input,
                                                      eval_input)
  start = time.time()
  metrics, _ = es.train_and_evaluate(estimator, train_spec, eval_spec,
                                     eval_every_n_steps=every)
  return (estimator, metrics, time.time() - start,
          batch.global_batch_size if batch else FLAGS.global_batch_size)


def run_training():
  """Trains, evaluates, exports and summarises as the flags say."""
  if _elastic():
    estimator, metrics, wall, global_batch_size = elastic.run(
        _train, FLAGS.global_batch_size, FLAGS.accumulation_steps,
        FLAGS.elastic_batch, FLAGS.commit_every_n_steps,
        FLAGS.intra_op_threads)
  else:
    estimator, metrics, wall, global_batch_size = _train()
  if estimator.stopped_by_signal:
    logging.warning("stopped by a signal at step %s; checkpoint written by "
                    "the chief, skipping evaluation", estimator.last_step)
    return
  if FLAGS.export_dir:
    path = estimator.export_saved_model(FLAGS.export_dir)
    logging.info("exported SavedModel to %s", os.fsdecode(path))
  if not estimator.topology.is_chief:
    return
  progress = estimator.progress
  speed = progress.examples_per_sec if progress else None
  if speed is None and wall > 0:
    speed = global_batch_size * (estimator.last_step or 0) / wall
  summary = _summary(estimator, metrics, wall, speed, global_batch_size)
  summary["evaluations"] = [{k: float(v) for k, v in e.items()}
                            for e in estimator.evaluations]
  print("final eval: " + ", ".join(f"{k}={v:.4f}" for k, v in
                                   sorted(summary["eval"].items())))
  if FLAGS.summary_json:
    _write_json(summary)


def _checkpoint(estimator):
  """The checkpoint --checkpoint names, or the latest in --model_dir."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if not FLAGS.model_dir:
    raise app.UsageError("evaluate and export need --model_dir")
  if FLAGS.checkpoint is None:
    path = estimator.latest_checkpoint()
    if path is None:
      raise app.UsageError(f"--model_dir={FLAGS.model_dir} holds no "
                           "checkpoint; train first, or pass --checkpoint")
    return path
  path = FLAGS.checkpoint
  if not tf.io.gfile.exists(path + ".index"):
    path = os.path.join(FLAGS.model_dir, FLAGS.checkpoint)
  if not tf.io.gfile.exists(path + ".index"):
    raise app.UsageError(f"--checkpoint={FLAGS.checkpoint} is not a "
                         f"checkpoint (no {path}.index); e.g. "
                         "--checkpoint=model.ckpt-1000")
  return path


def run_evaluation():
  """Evaluates a checkpoint of --model_dir on the eval data; prints metrics."""
  estimator = _estimator(_registered_model())
  logs.configure(estimator.topology.is_chief)
  checkpoint = _checkpoint(estimator)
  _, eval_input = cli_evaluation.input_fns(estimator)
  metrics = estimator.evaluate(eval_input, steps=FLAGS.eval_steps,
                               checkpoint_path=checkpoint)
  metrics = {k: float(v) for k, v in metrics.items()}
  print(f"eval of {checkpoint}: " + ", ".join(
      f"{k}={v:.4f}" for k, v in sorted(metrics.items())))
  if FLAGS.summary_json and estimator.topology.is_chief:
    _write_json({"model": FLAGS.model, "checkpoint": checkpoint,
                 "eval": metrics})


def run_export():
  """Exports a checkpoint of --model_dir as a SavedModel under --export_dir."""
  if not FLAGS.export_dir:
    raise app.UsageError("export needs --export_dir")
  estimator = _estimator(_registered_model())
  logs.configure(estimator.topology.is_chief)
  path = estimator.export_saved_model(FLAGS.export_dir,
                                      checkpoint_path=_checkpoint(estimator))
  print(f"exported SavedModel to {os.fsdecode(path)}")


def _write_json(summary):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.io.gfile.makedirs(os.path.dirname(FLAGS.summary_json) or ".")
  with tf.io.gfile.GFile(FLAGS.summary_json, "w") as f:
    json.dump(summary, f, indent=2, sort_keys=True)


def list_models():
  registry = _load_models()
  for name in registry.names():
    print(f"{name:20s} {registry.describe(name)}")


_COMMANDS = {"train": run_training, "evaluate": run_evaluation,
             "export": run_export, "models": list_models}


def _as_flags(message):
  """The library's message in the user's words: `global_batch_size=3` (an
  argument) becomes `--global_batch_size=3` (the flag they typed).

  The one place the CLI adds dashes: a flag's name directly followed by
  `=` or `:`, not inside a path, a quoted example or a flag already dashed.
  """
  names = sorted((name for name in FLAGS if len(name) > 3), key=len,
                 reverse=True)
  pattern = rf"(?<![\w./'\"-])({'|'.join(map(re.escape, names))})(?=[=:])"
  return re.sub(pattern, r"--\1", str(message))


def _fail(message):
  """One line on stderr and exit 2: what a usage or configuration error gets."""
  print(f"estimator-scale: error: {_as_flags(message)}", file=sys.stderr)
  sys.exit(2)


def _parse_flags(argv):
  """absl's parser, but a bad flag is one line and exit 2, like the rest."""
  try:
    return FLAGS(argv)
  except flags.Error as e:
    _fail(e)


_PATH_FLAGS = ("model_dir", "train_data", "eval_data", "export_dir",
               "checkpoint", "summary_json")


def _require_file_systems():
  """Loads the file system of every path flag's scheme, before any work: a
  missing one would otherwise surface as a traceback at the first save or
  read, minutes into a job."""
  for name in _PATH_FLAGS:
    filesystems.require(name, FLAGS[name].value)


def main(argv):
  command = argv[1:] or ["train"]
  if len(command) != 1 or command[0] not in _COMMANDS:
    _fail(f"unknown command {' '.join(command)!r}; valid: "
          f"{', '.join(_COMMANDS)}")
  logs.configure()
  try:
    _require_file_systems()
    _COMMANDS[command[0]]()
  except (errors.Error, app.UsageError) as e:
    _fail(e)
  # Anything else (the model's code, TensorFlow at run time) propagates:
  # Python prints its traceback and exits 1.


def run():
  """Console-script entry point.

  A process that loaded tensorflow-io ends through
  `filesystems.exit_process`, with the status it would have had (a
  traceback is printed first, as Python would), because its normal exit
  aborts in tensorflow-io's destructors after the work is done.
  """
  try:
    app.run(main, flags_parser=_parse_flags)
  except SystemExit as e:
    if not filesystems.io_loaded():
      raise
    filesystems.exit_process(filesystems.exit_status(e.code))
  except BaseException:  # pylint: disable=broad-except
    if not filesystems.io_loaded():
      raise
    sys.excepthook(*sys.exc_info())
    filesystems.exit_process(1)


if __name__ == "__main__":
  run()

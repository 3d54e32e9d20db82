"""The command line: `estimator-scale train ...` / `python -m estimator_scale.train ...`.

Trains a registered model (or one from --model_module), evaluates it,
optionally exports a SavedModel, and writes a one-object JSON summary.
`estimator-scale models` lists the registered models.
"""
import json
import os
import sys
import time

from absl import app
from absl import flags
from absl import logging

FLAGS = flags.FLAGS

flags.DEFINE_string("model", "digits_cnn", "Registered model name.")
flags.DEFINE_string("model_module", None,
                    "Python module to import first; it registers your models.")
flags.DEFINE_string("model_dir", None,
                    "Checkpoint directory, shared by all workers "
                    "(default: a new temporary directory).")
flags.DEFINE_integer("global_batch_size", 64,
                     "Examples per update, summed over all workers.")
flags.DEFINE_integer("train_steps", 1000, "Updates to train (from step 0).")
flags.DEFINE_integer("eval_steps", None,
                     "Evaluation batches (default: the whole eval set).")
flags.DEFINE_string("optimizer", "momentum",
                    "sgd | momentum | adam | adamw | lars | lamb.")
flags.DEFINE_float("learning_rate", 0.05, "Base (S = 1) learning rate.")
flags.DEFINE_float("momentum", 0.9, "Momentum of `momentum` and `lars`.")
flags.DEFINE_float("weight_decay", None,
                   "Weight decay of `adamw`, `lamb` (decoupled) and `lars` "
                   "(unset: each one's default, 0.01 for adamw and lamb, "
                   "1e-4 for lars).")
flags.DEFINE_float("trust_coefficient", 0.001,
                   "LARS's trust coefficient eta.")
flags.DEFINE_string("lr_schedule", "constant",
                    "constant | piecewise | cosine | polynomial.")
flags.DEFINE_list("lr_boundaries", [], "`piecewise` decay steps.")
flags.DEFINE_float("lr_decay_rate", 0.1, "`piecewise` factor per boundary.")
flags.DEFINE_integer("lr_decay_steps", 0, "`cosine`/`polynomial` length.")
flags.DEFINE_integer("warmup_steps", 0, "Linear warm-up of the base rate.")
flags.DEFINE_string("hparams", "", "Model hyperparameters: a=1,b=0.5.")
flags.DEFINE_string("distribution", "none",
                    "none | mirrored | multi_worker_mirrored | "
                    "parameter_server | horovod.")
flags.DEFINE_integer("replicas", None, "`mirrored` replicas in this process.")
flags.DEFINE_integer("accumulation_steps", 1, "Micro-batches per update.")
flags.DEFINE_string("lr_scaling", "identity",
                    "identity | linear | sqrt | adascale.")
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
flags.DEFINE_enum("precision", "float32",
                  ["float32", "mixed_bfloat16", "mixed_float16"],
                  "The network's compute type; variables and the optimizer "
                  "stay float32; mixed_float16 adds dynamic loss scaling.")
flags.DEFINE_enum("allreduce_compression", "none", ["none", "fp16", "bf16"],
                  "16-bit gradients on the wire of the allreduce "
                  "(--distribution=horovod: none or fp16).")
flags.DEFINE_string("export_dir", None, "Export a SavedModel under here.")
flags.DEFINE_string("summary_json", None, "Write the run summary here.")
flags.DEFINE_integer("save_checkpoints_steps", 500, "Checkpoint interval.")
flags.DEFINE_integer("log_every_n_steps", 100, "Progress line interval.")
flags.DEFINE_integer("random_seed", 0, "Graph-level random seed.")
flags.DEFINE_integer("intra_op_threads", None,
                     "Threads per op (default: cores, / ranks per host).")


class UsageError(ValueError):
  """A flag value the CLI rejects before any training."""


def _positive(name):
  value = getattr(FLAGS, name)
  if value is not None and value <= 0:
    raise UsageError(f"--{name} must be > 0, got {value}")


def training_config_from_flags():
  """The `TrainingConfig` the flags describe."""
  import estimator_scale as es  # pylint: disable=g-import-not-at-top
  try:
    boundaries = tuple(int(b) for b in FLAGS.lr_boundaries)
  except ValueError:
    raise UsageError("--lr_boundaries must be integers, got "
                     f"{FLAGS.lr_boundaries}") from None
  schedule = es.Schedule(
      name=FLAGS.lr_schedule, learning_rate=FLAGS.learning_rate,
      boundaries=boundaries, decay_rate=FLAGS.lr_decay_rate,
      decay_steps=FLAGS.lr_decay_steps, warmup_steps=FLAGS.warmup_steps)
  options = {"momentum": FLAGS.momentum,
             "trust_coefficient": FLAGS.trust_coefficient}
  if FLAGS.weight_decay is not None:
    options["weight_decay"] = FLAGS.weight_decay
  return es.TrainingConfig(
      optimizer=FLAGS.optimizer, schedule=schedule,
      accumulation_steps=FLAGS.accumulation_steps,
      lr_scaling=FLAGS.lr_scaling, scale=FLAGS.scale,
      scaling_warmup_updates=FLAGS.scaling_warmup_updates,
      adascale_smoothing=FLAGS.adascale_smoothing,
      optimizer_options=tuple(sorted(options.items())),
      precision=FLAGS.precision,
      allreduce_compression=FLAGS.allreduce_compression)


def _summary(estimator, metrics, wall_seconds, examples_per_sec):
  import estimator_scale as es  # pylint: disable=g-import-not-at-top
  names = set(estimator.get_variable_names())
  summary = {
      "model": FLAGS.model, "distribution": FLAGS.distribution,
      "workers": estimator.topology.num_workers,
      "replicas": estimator.topology.num_replicas,
      "global_batch_size": FLAGS.global_batch_size,
      "accumulation_steps": FLAGS.accumulation_steps,
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


def run_training():
  """Trains, evaluates, exports and summarises as the flags say."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import estimator_scale as es  # pylint: disable=g-import-not-at-top
  from estimator_scale import registry  # pylint: disable=g-import-not-at-top
  for name in ("global_batch_size", "train_steps", "eval_steps",
               "save_checkpoints_steps", "log_every_n_steps",
               "intra_op_threads"):
    _positive(name)
  if FLAGS.model_module:
    registry.load_module(FLAGS.model_module)
  model = registry.get(FLAGS.model)
  model_dir = FLAGS.model_dir
  estimator = es.make_estimator(
      model, model_dir=model_dir, distribution=FLAGS.distribution,
      training_config=training_config_from_flags(), hparams=FLAGS.hparams,
      global_batch_size=FLAGS.global_batch_size,
      progress_every_n_steps=FLAGS.log_every_n_steps,
      scale_invariant_steps=FLAGS.scale_invariant_steps,
      replicas=FLAGS.replicas, random_seed=FLAGS.random_seed,
      intra_op_threads=FLAGS.intra_op_threads,
      save_checkpoints_steps=FLAGS.save_checkpoints_steps,
      save_summary_steps=FLAGS.log_every_n_steps,
      log_step_count_steps=FLAGS.log_every_n_steps)
  train_input = estimator.model_input_fn(tf.estimator.ModeKeys.TRAIN,
                                         FLAGS.global_batch_size)
  eval_input = estimator.model_input_fn(tf.estimator.ModeKeys.EVAL,
                                        FLAGS.global_batch_size)
  start = time.time()
  estimator.train(train_input, max_steps=FLAGS.train_steps)
  wall = time.time() - start
  if estimator.stopped_by_signal:
    logging.warning("stopped by a signal at step %s; checkpoint written by "
                    "the chief, skipping evaluation", estimator.last_step)
    return
  metrics = estimator.evaluate(eval_input, steps=FLAGS.eval_steps)
  if FLAGS.export_dir:
    path = estimator.export_saved_model(FLAGS.export_dir)
    logging.info("exported SavedModel to %s", os.fsdecode(path))
  if not estimator.topology.is_chief:
    return
  progress = getattr(estimator, "progress", None)
  speed = progress.examples_per_sec if progress else None
  if speed is None and wall > 0:
    speed = FLAGS.global_batch_size * (estimator.last_step or 0) / wall
  summary = _summary(estimator, metrics, wall, speed)
  logging.info("final: %s", json.dumps(summary["eval"]))
  print("final eval: " + ", ".join(f"{k}={v:.4f}" for k, v in
                                   sorted(summary["eval"].items())))
  if FLAGS.summary_json:
    os.makedirs(os.path.dirname(os.path.abspath(FLAGS.summary_json)),
                exist_ok=True)
    with open(FLAGS.summary_json, "w", encoding="utf-8") as f:
      json.dump(summary, f, indent=2, sort_keys=True)


def list_models():
  from estimator_scale import registry  # pylint: disable=g-import-not-at-top
  if FLAGS.model_module:
    registry.load_module(FLAGS.model_module)
  for name in registry.names():
    print(f"{name:20s} {registry.describe(name)}")


def main(argv):
  command = argv[1:] or ["train"]
  if command not in (["train"], ["models"]):
    print(f"estimator-scale: unknown command {' '.join(command)!r}; valid: "
          "train, models", file=sys.stderr)
    sys.exit(2)
  try:
    if command == ["models"]:
      list_models()
    else:
      run_training()
  except ValueError as e:  # includes TopologyError and UsageError
    print(f"estimator-scale: error: {e}", file=sys.stderr)
    sys.exit(2)


def run():
  """Console-script entry point."""
  app.run(main)


if __name__ == "__main__":
  run()

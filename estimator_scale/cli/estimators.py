"""What every command makes from the flags: models, config, Estimator, JSON."""
import json
import os

from absl import app
import tensorflow as tf

import estimator_scale as es
from estimator_scale import registry
from estimator_scale.cli import flags
from estimator_scale.train_ops import optimizers

FLAGS = flags.FLAGS


def training_config_from_flags(accumulation_steps=None):
  """The `TrainingConfig` the flags describe (another accumulation_steps:
  an elastic job's at its current size)."""
  try:
    boundaries = tuple(int(b) for b in FLAGS.lr_boundaries)
  except ValueError:
    raise app.UsageError("--lr_boundaries must be integers, got "
                         f"{FLAGS.lr_boundaries}") from None
  _check_option_flags()
  return es.TrainingConfig(
      optimizer=FLAGS.optimizer, learning_rate=FLAGS.learning_rate,
      lr_schedule=FLAGS.lr_schedule, lr_boundaries=boundaries,
      lr_decay_rate=FLAGS.lr_decay_rate, lr_decay_steps=FLAGS.lr_decay_steps,
      lr_power=FLAGS.lr_power, warmup_steps=FLAGS.warmup_steps,
      accumulation_steps=accumulation_steps or FLAGS.accumulation_steps,
      lr_scaling=FLAGS.lr_scaling, batch_scale=FLAGS.batch_scale,
      scaling_warmup_updates=FLAGS.scaling_warmup_updates,
      adascale_smoothing=FLAGS.adascale_smoothing,
      adascale_parts=FLAGS.adascale_parts,
      cowclip_ratio=FLAGS.cowclip_ratio,
      cowclip_min_norm=FLAGS.cowclip_min_norm,
      optimizer_options=_optimizer_options(FLAGS.optimizer),
      linear_optimizer=FLAGS.linear_optimizer,
      linear_optimizer_options=(_optimizer_options(FLAGS.linear_optimizer)
                                if FLAGS.linear_optimizer else ()),
      precision=FLAGS.precision,
      allreduce_compression=FLAGS.allreduce_compression,
      sparse_exchange=FLAGS.sparse_exchange)


def _optimizer_options(optimizer):
  """The option flags `optimizer` takes, as (name, value) pairs."""
  takes = optimizers.valid_options(optimizer)
  return tuple(sorted((name, FLAGS[name].value)
                      for name in flags.OPTIMIZER_OPTION_FLAGS
                      if name in takes and FLAGS[name].value is not None))


def _check_option_flags():
  """Refuses an option flag no chosen optimizer takes (it would do nothing)."""
  chosen = [f"--optimizer={FLAGS.optimizer}"]
  takes = set(optimizers.valid_options(FLAGS.optimizer))
  if FLAGS.linear_optimizer:
    chosen.append(f"--linear_optimizer={FLAGS.linear_optimizer}")
    takes.update(optimizers.valid_options(FLAGS.linear_optimizer))
  for name in flags.OPTIMIZER_OPTION_FLAGS:
    if FLAGS[name].present and name not in takes:
      usable = [f"--{flag}" for flag in flags.OPTIMIZER_OPTION_FLAGS
                if flag in takes]
      raise app.UsageError(
          f"--{name} does not apply to {' or '.join(chosen)} "
          f"({'its' if len(chosen) == 1 else 'their'} option flags: "
          f"{', '.join(usable) or 'none'})")


def _load_models():
  """Registers the zoo's and --model_module's models; the framework never
  imports the zoo."""
  registry.load_module("model_zoo")
  if FLAGS.model_module:
    registry.load_module(FLAGS.model_module)


def registered_model():
  """The model --model names, among the zoo's and --model_module's."""
  _load_models()
  return registry.get(FLAGS.model)


def list_models():
  """The `models` command: each registered model and what it is."""
  _load_models()
  for name in registry.names():
    print(f"{name:20s} {registry.describe(name)}")


def estimator(model, batch=None):
  """The Estimator the flags describe; `batch` replaces the batch flags."""
  return es.make_estimator(
      model, model_dir=FLAGS.model_dir, distribution=FLAGS.distribution,
      training_config=training_config_from_flags(
          batch and batch.accumulation_steps), hparams=FLAGS.hparams,
      global_batch_size=(batch.global_batch_size if batch else
                         FLAGS.global_batch_size),
      progress_every_n_steps=FLAGS.log_every_n_steps,
      scale_invariant_steps=FLAGS.scale_invariant_steps,
      replicas=FLAGS.replicas, ps_sync=FLAGS.ps_sync,
      random_seed=FLAGS.random_seed,
      intra_op_threads=FLAGS.intra_op_threads,
      save_checkpoints_steps=FLAGS.save_checkpoints_steps,
      full_checkpoint_every=FLAGS.full_checkpoint_every,
      save_summary_steps=FLAGS.log_every_n_steps,
      log_step_count_steps=FLAGS.log_every_n_steps)


def write_summary(summary):
  """Writes `summary` as JSON to --summary_json (any tf.io.gfile path)."""
  tf.io.gfile.makedirs(os.path.dirname(FLAGS.summary_json) or ".")
  with tf.io.gfile.GFile(FLAGS.summary_json, "w") as f:
    json.dump(summary, f, indent=2, sort_keys=True)

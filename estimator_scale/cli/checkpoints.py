"""The `evaluate` and `export` commands: a saved checkpoint of --model_dir,
evaluated or exported without training."""
import os

from absl import app
import tensorflow as tf

from estimator_scale.cli import estimators
from estimator_scale.cli import evaluation
from estimator_scale.cli import flags
from estimator_scale.cli import logs

FLAGS = flags.FLAGS


def _estimator():
  estimator = estimators.estimator(estimators.registered_model())
  logs.configure(estimator.topology.is_chief)
  return estimator


def _checkpoint(estimator):
  """The checkpoint --checkpoint names, or the latest in --model_dir."""
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
  estimator = _estimator()
  checkpoint = _checkpoint(estimator)
  _, eval_input = evaluation.input_fns(estimator)
  metrics = estimator.evaluate(eval_input, steps=FLAGS.eval_steps,
                               checkpoint_path=checkpoint)
  metrics = {k: float(v) for k, v in metrics.items()}
  print(f"eval of {checkpoint}: " + ", ".join(
      f"{k}={v:.4f}" for k, v in sorted(metrics.items())))
  if FLAGS.summary_json and estimator.topology.is_chief:
    estimators.write_summary({"model": FLAGS.model, "checkpoint": checkpoint,
                              "eval": metrics})


def run_export():
  """Exports a checkpoint of --model_dir as a SavedModel under --export_dir."""
  if not FLAGS.export_dir:
    raise app.UsageError("export needs --export_dir")
  estimator = _estimator()
  path = estimator.export_saved_model(FLAGS.export_dir,
                                      checkpoint_path=_checkpoint(estimator),
                                      compact=flags.compact_export())
  print(f"exported SavedModel to {os.fsdecode(path)}")

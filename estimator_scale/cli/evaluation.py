"""A run's inputs and how it evaluates: the user's files or the model's
data, the cadence, the best export and early stopping the flags ask for."""
from absl import app
import tensorflow as tf

import estimator_scale as es
from estimator_scale.cli import flags

FLAGS = flags.FLAGS


def _compare(name, higher_is_better):
  """A BestExporter compare_fn: whether `current` beats `best` on `name`."""
  def compare(best_eval_result, current_eval_result):
    for result in (best_eval_result, current_eval_result):
      if name not in result:
        raise app.UsageError(
            f"--export_best: {name!r} is not an eval metric; valid: "
            f"{', '.join(sorted(result))}")
    best, current = best_eval_result[name], current_eval_result[name]
    return current > best if higher_is_better else current < best
  return compare


def input_fns(estimator, global_batch_size=None):
  """(train input_fn, eval input_fn): the user's files or the model's data,
  in batches of --global_batch_size unless given another."""
  if bool(FLAGS.train_data) != bool(FLAGS.eval_data):
    raise app.UsageError("pass both --train_data and --eval_data, or "
                         "neither (the model's own data)")
  global_batch_size = global_batch_size or FLAGS.global_batch_size
  result = []
  for mode, pattern in ((tf.estimator.ModeKeys.TRAIN, FLAGS.train_data),
                        (tf.estimator.ModeKeys.EVAL, FLAGS.eval_data)):
    if pattern:
      result.append(estimator.files_input_fn(
          pattern, mode, global_batch_size,
          skip_corrupt=FLAGS.skip_corrupt_records))
    else:
      result.append(estimator.model_input_fn(mode, global_batch_size))
  return tuple(result)


def specs(estimator, train_input, eval_input):
  """(TrainSpec, EvalSpec, eval_every_n_steps) the flags describe."""
  if FLAGS.eval_every_n_steps and FLAGS.eval_every_secs is not None:
    raise app.UsageError("pass --eval_every_n_steps or --eval_every_secs, "
                         "not both")
  name, higher_is_better = flags.best_metric()
  hooks = []
  if FLAGS.early_stopping:
    hooks.append(es.EarlyStoppingHook(
        name, higher_is_better,
        max_evaluations_without_improvement=FLAGS.early_stopping))
  exporters = []
  if FLAGS.export_best:
    if estimator.model is None:
      raise app.UsageError("--export_best needs a model with serving inputs")
    exporters.append(tf.estimator.BestExporter(
        name="best", compare_fn=_compare(name, higher_is_better),
        serving_input_receiver_fn=(
            estimator.model.serving_input_receiver_fn()),
        exports_to_keep=1))
  every = FLAGS.eval_every_n_steps
  if every is None and FLAGS.eval_every_secs is None:
    every = FLAGS.train_steps  # one evaluation, at the end
  train_spec = tf.estimator.TrainSpec(train_input,
                                      max_steps=FLAGS.train_steps,
                                      hooks=hooks)
  eval_spec = tf.estimator.EvalSpec(
      eval_input, steps=FLAGS.eval_steps, exporters=exporters,
      throttle_secs=FLAGS.eval_every_secs or 0)
  return train_spec, eval_spec, every

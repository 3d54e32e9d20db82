"""`train --days`: dated partitions, each day trained once and judged on
the next (`estimator_scale.by_day`), from the command line."""
from absl import app
from absl import logging

import estimator_scale as es
from estimator_scale import backends
from estimator_scale import day_summary
from estimator_scale.cli import estimators
from estimator_scale.cli import flags
from estimator_scale.cli import logs

FLAGS = flags.FLAGS


def check_flags():
  """Refuses what --days replaces or lacks, and --follow without it."""
  if not FLAGS.days:
    for name in flags.DAY_FLAGS:
      if FLAGS[name].present:
        raise app.UsageError(
            f"--{name} applies with --days only, e.g. --days=2026-01-01: "
            "--follow --train_data=ROOT")
    return
  if not FLAGS.train_data:
    raise app.UsageError(
        "--days needs --train_data=ROOT, the root of the days "
        "(ROOT/day=YYYY-MM-DD/ folders or files named with the date)")
  for name in flags.NOT_BY_DAY_FLAGS:
    if FLAGS[name].present:
      raise app.UsageError(
          f"--{name} does not apply with --days: each day trains its "
          "examples once and is evaluated on the next day")
  if backends.get(FLAGS.distribution).elastic_requested():
    raise app.UsageError("--days does not run in an elastic Horovod job: "
                         "run it with a fixed number of ranks")


def run_days():
  """Trains the days --days names; prints and writes the summary. Returns
  whether a SIGTERM stopped it first."""
  estimator = estimators.estimator(estimators.registered_model())
  logs.configure(estimator.topology.is_chief)
  metric, higher_is_better = (flags.best_metric() if FLAGS.export_best
                              else ("auc", True))
  summary = es.train_by_day(
      estimator, FLAGS.train_data, FLAGS.days, FLAGS.global_batch_size,
      eval_data=FLAGS.eval_data, follow=FLAGS.follow,
      follow_timeout_secs=FLAGS.follow_timeout_secs,
      export_dir=FLAGS.export_dir, best_metric=metric,
      higher_is_better=higher_is_better, eval_steps=FLAGS.eval_steps,
      skip_corrupt=FLAGS.skip_corrupt_records,
      compact_export=flags.compact_export())
  if estimator.stopped_by_signal:
    logging.warning("stopped by a signal at step %s; the same command "
                    "goes on from there", estimator.last_step)
    return True
  if not estimator.topology.is_chief:
    return False
  print(day_summary.table(summary, metric), end="")
  if FLAGS.summary_json:
    extra = {"model": FLAGS.model}
    if estimator.progress:  # the last day's session
      extra["input_wait"] = estimator.progress.input_wait_summary()
    estimators.write_summary(dict(summary, **extra))
  return False

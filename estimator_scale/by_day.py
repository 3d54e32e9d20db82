"""`train_by_day`: days of logs, each trained once, judged on the next.

Every step follows from what model_dir holds, so the same call after a
kill resumes.
"""
import datetime
import functools
import os
import time

from absl import logging
import tensorflow as tf

from estimator_scale import day_summary
from estimator_scale import errors
from estimator_scale.backends import coordinator as coordinator_lib
from estimator_scale.inputs import days as days_lib
from estimator_scale.inputs import position

_TRAIN, _EVAL = tf.estimator.ModeKeys.TRAIN, tf.estimator.ModeKeys.EVAL
_ONE_DAY = datetime.timedelta(days=1)


def _check(estimator, global_batch_size, summary):
  if estimator.model is None:
    raise errors.UsageError(
        "train_by_day needs an Estimator around a BaseModel: its "
        "feature_spec() says how a day's files are read")
  if not estimator.topology.synchronous:
    raise errors.ConfigError(
        "train_by_day needs synchronous workers: asynchronous parameter "
        "servers train no fixed examples per update, so a day's position "
        "is unknown (use ps_sync=True)")
  trained_with = summary.get("global_batch_size")
  if trained_with not in (None, global_batch_size):
    raise errors.ConfigError(
        f"global_batch_size={global_batch_size}: {estimator.model_dir} "
        f"trained its days with global_batch_size={trained_with}, which a "
        "day's position needs; resume with it, or train in a new model_dir")


def _next_day(root, day, last, follow, timeout_secs):
  """Day + 1's Partition of `root` for the evaluation, or None: the end of
  a range without it, or a wait that timed out."""
  following = day + _ONE_DAY
  found = days_lib.landed(root, following, "eval_data")
  beyond = last is not None and following > last
  if found or beyond or not follow:
    return found
  return days_lib.wait_for(root, following, timeout_secs, "eval_data")


def _judge(estimator, day, entry, following, checkpoint=None, *,
           global_batch_size, eval_steps, skip_corrupt):
  """Evaluates day's model on `following` into its entry (checkpoint None:
  the latest)."""
  metrics = estimator.evaluate(estimator.files_input_fn(
      list(following.files), _EVAL, global_batch_size,
      skip_corrupt=skip_corrupt), steps=eval_steps, checkpoint_path=checkpoint)
  entry["eval_day"] = str(following.day)
  entry["eval"] = {k: float(v) for k, v in metrics.items()}
  logging.info("days: day %s on day %s: %s", day, following.day,
               day_summary.said(entry["eval"]))


def _judged(entry):
  """Whether a day's next-day evaluation is done, or known impossible."""
  return "eval_day" in entry or "not_judged" in entry


def _judge_late(summary, before, eval_data, model_dir, judge):
  """Judges earlier days whose next day has landed since, on their own
  checkpoints; returns whether any entry changed."""
  changed = False
  for name, entry in sorted(summary["days"].items()):
    day = datetime.date.fromisoformat(name)
    if day >= before or "export" not in entry or _judged(entry):
      continue
    following = days_lib.landed(eval_data, day + _ONE_DAY, "eval_data")
    if following is None:
      continue
    checkpoint = os.path.join(model_dir, f"model.ckpt-{entry['end_step']}")
    if tf.io.gfile.exists(checkpoint + ".index"):
      judge(day, entry, following, checkpoint)
    else:
      entry["not_judged"] = (
          f"its checkpoint {checkpoint} was no longer kept "
          f"(keep_checkpoint_max) when day {following.day} landed")
      logging.warning("days: day %s is not judged on day %s: %s", day,
                      following.day, entry["not_judged"])
    changed = True
  return changed


def _export(estimator, export_dir, day, compact):
  """Day's SavedModel under export_dir/<day>/, made once; its path."""
  base = os.path.join(export_dir, str(day))
  names = tf.io.gfile.listdir(base) if tf.io.gfile.isdir(base) else []
  # A kill inside an export leaves it under temp-<timestamp>, not a number.
  done = [os.path.join(base, name.rstrip("/")) for name in sorted(names)
          if name.rstrip("/").isdigit() and tf.io.gfile.exists(
              os.path.join(base, name.rstrip("/"), "saved_model.pb"))]
  if done:
    return done[-1]
  return os.fsdecode(estimator.export_saved_model(base, compact=compact))


def _train_day(estimator, partition, start_step, global_batch_size,
               skip_corrupt):
  """Trains the rest of one day; (entry fields, whether a signal stopped)."""
  topology = estimator.topology
  records = days_lib.count_records(partition, estimator.model_dir,
                                   topology.worker_index, skip_corrupt)
  span = days_lib.span(
      start_step, records, global_batch_size,
      topology.num_replicas * estimator.training_config.accumulation_steps)
  end = start_step + days_lib.updates(span, global_batch_size)
  fields = {"records": records, "examples": span.examples,
            "left_out": records - span.examples, "start_step": start_step,
            "end_step": end, "updates": end - start_step}
  done = position.span_done(estimator.model_dir, span, global_batch_size)
  if done >= span.examples:
    return fields, False
  logging.info("days: training day %s, examples %d to %d of %d",
               partition.day, done, span.examples, records)
  began = time.time()
  estimator.train(estimator.files_input_fn(
      list(partition.files), _TRAIN, global_batch_size,
      skip_corrupt=skip_corrupt, span=span), max_steps=end)
  seconds = time.time() - began
  if estimator.stopped_by_signal:
    return fields, True
  if estimator.last_step != end:
    raise errors.DataError(
        f"day {partition.day}: its input ended at step "
        f"{estimator.last_step}, before step {end}; were its files changed "
        "while it trained?")
  fields["seconds"] = seconds
  # The progress hook's speed leaves out building the graph and the
  # session, which would swamp a small day's; only the chief has one.
  progress = estimator.progress and estimator.progress.examples_per_sec
  fields["examples_per_sec"] = progress or (span.examples - done) / max(
      seconds, 1e-9)
  if estimator.progress and estimator.progress.tables:
    fields["tables"] = estimator.progress.tables
  return fields, False


def train_by_day(estimator, train_data, days, global_batch_size,
                 eval_data=None, follow=False, follow_timeout_secs=3600,
                 export_dir=None, best_metric="auc", higher_is_better=True,
                 eval_steps=None, skip_corrupt=False, compact_export=None):
  """Trains each day of `days` once, in order; evaluates each on the next.

  Args:
    estimator: an `Estimator` of `make_estimator` around a `BaseModel`.
    train_data, eval_data: roots of the days (`inputs.days`); eval_data
      defaults to train_data.
    days: "FIRST:LAST", "DAY", or open "FIRST:" (needs `follow`).
    global_batch_size: examples per update; the same on every resume.
    follow: wait up to `follow_timeout_secs` for each day's `_SUCCESS`.
    export_dir: each day's SavedModel's root; default model_dir/export.
    best_metric, higher_is_better: which evaluation picks the best day.
    eval_steps: evaluation batches (default: the whole next day).
    skip_corrupt: drop unreadable TFRecord records.
    compact_export: a `CompactExport` for each day's dynamic tables.

  Returns:
    The summary (`day_summary`): one entry per day trained.

  Raises:
    ConfigError: a range, root or day that cannot be trained or did not land.
  """
  first, last = days_lib.parse_range(days)
  eval_data = eval_data or train_data
  days_lib.check_days(train_data, first, last, follow)
  model_dir = estimator.model_dir
  export_dir = export_dir or os.path.join(model_dir, "export")
  summary = day_summary.load(model_dir)
  _check(estimator, global_batch_size, summary)
  summary["global_batch_size"] = global_batch_size
  is_chief = estimator.topology.is_chief
  day, waited = first, None  # waited: the day a wait for it timed out
  start_step = _first_step(summary, day, model_dir)
  judge = functools.partial(_judge, estimator,
                            global_batch_size=global_batch_size,
                            eval_steps=eval_steps, skip_corrupt=skip_corrupt)
  while last is None or day <= last:
    partition = days_lib.landed(train_data, day)
    if partition is None and follow and day != waited:
      partition = days_lib.wait_for(train_data, day, follow_timeout_secs)
    if partition is None:
      if last is None and day > first:
        logging.info("days: day %s did not land within %d s; stopping "
                     "after day %s (the same command goes on from there)",
                     day, follow_timeout_secs, day - _ONE_DAY)
        break
      raise errors.ConfigError(
          f"days={days}: day {day} did not land in train_data={train_data} "
          f"within follow_timeout_secs={follow_timeout_secs} (no "
          f"day={day}/{days_lib.SUCCESS}); the days before it are trained: "
          "run the same command again to go on once it lands")
    if _judge_late(summary, day, eval_data, model_dir, judge):
      _save(summary, model_dir, export_dir, is_chief, best_metric,
            higher_is_better)
    entry = day_summary.entry(summary, day)
    if "start_step" not in entry:  # saved first: a kill in the day needs it
      entry["start_step"] = start_step
      _save(summary, model_dir, export_dir, is_chief)
    if not _trained(entry, model_dir):
      fields, stopped = _train_day(estimator, partition, entry["start_step"],
                                   global_batch_size, skip_corrupt)
      entry.update(fields)
      if stopped:
        break
    if "export" not in entry:
      entry["export"] = _export(estimator, export_dir, day, compact_export)
      _save(summary, model_dir, export_dir, is_chief)
    if not _judged(entry):
      following = _next_day(eval_data, day, last, follow, follow_timeout_secs)
      if following is None:
        waited = day + _ONE_DAY
      else:
        judge(day, entry, following)
    _save(summary, model_dir, export_dir, is_chief, best_metric,
          higher_is_better)
    start_step, day = entry["end_step"], day + _ONE_DAY
  return summary


def _trained(entry, model_dir):
  """Whether a day's training is done, by its recorded end (under another
  worker count its last update could round differently)."""
  return ("end_step" in entry and
          coordinator_lib.checkpoint_step(model_dir) >= entry["end_step"])


def _first_step(summary, day, model_dir):
  """Where `day` starts: as before, else where trained days end, else the
  checkpoint."""
  entries = summary["days"]
  if str(day) in entries:
    return entries[str(day)]["start_step"]
  ends = [e["end_step"] for e in entries.values() if "end_step" in e]
  if ends:
    return max(ends)
  return coordinator_lib.checkpoint_step(model_dir)


def _save(summary, model_dir, export_dir, is_chief, best_metric=None,
          higher_is_better=True):
  """The chief writes the summary (and the best day, once one is judged)."""
  if not is_chief:
    return
  if best_metric:
    day_summary.keep_best(summary, export_dir, best_metric, higher_is_better)
  day_summary.save(summary, model_dir, best_metric)

"""Dated partitions: logs arriving a day at a time, each day read once.

A root is Spark's `ROOT/day=YYYY-MM-DD/` (complete once `_SUCCESS` is
there, if any folder has one) or files dated in their names.
"""
import dataclasses
import datetime
import math
import os
import re
import time

from absl import logging
import tensorflow as tf

from estimator_scale import errors
from estimator_scale.inputs import data_files
from estimator_scale.inputs import file_shards
from estimator_scale.inputs import position

SUCCESS = "_SUCCESS"
"""The file Spark writes into a partition once all of it is written."""

_FOLDER = re.compile(r"^day=(\d{4}-\d{2}-\d{2})/?$")
_DATE_IN_NAME = re.compile(r"(?<!\d)(\d{4}-\d{2}-\d{2})(?!\d)")
_RANGE_FORMS = ("YYYY-MM-DD:YYYY-MM-DD (first and last day, both trained), "
                "YYYY-MM-DD (one day), or YYYY-MM-DD: (every day from then "
                "on, with follow)")
POLL_SECS = 2.0
"""How often a wait for a day looks at its root again."""


@dataclasses.dataclass(frozen=True)
class Partition:
  """One day of a root: `day`, sorted `files`, and whether it has `landed`."""
  day: datetime.date
  files: tuple
  landed: bool


def _date(text):
  try:
    return datetime.date.fromisoformat(text)
  except ValueError:
    return None


def parse_range(text, name="days"):
  """(first day, last day or None) of "FIRST:LAST", "DAY" or "FIRST:".

  Raises:
    ConfigError: naming `name` and the valid forms.
  """
  first_text, colon, last_text = (text or "").strip().partition(":")
  first = _date(first_text)
  last = _date(last_text) if last_text else None
  if first is None or (last_text and last is None):
    raise errors.ConfigError(f"{name}={text!r} is not a range of days; "
                             f"valid: {_RANGE_FORMS}")
  if not colon:
    last = first
  if last is not None and last < first:
    raise errors.ConfigError(
        f"{name}={text!r}: the last day comes before the first; valid: "
        f"{first_text}:{first_text} or later, e.g. "
        f"{first_text}:{first + datetime.timedelta(days=2)}")
  return first, last


def _data_files(names):
  return [n for n in names if not n.rstrip("/").startswith(("_", "."))]


def _folder(root, entry):
  """(data files, whether it holds _SUCCESS) of the day folder `entry`."""
  path = os.path.join(root, entry.rstrip("/"))
  names = tf.io.gfile.listdir(path)
  return (tuple(sorted(os.path.join(path, n.rstrip("/"))
                       for n in _data_files(names))), SUCCESS in names)


def partitions(root, name="train_data"):
  """{day: Partition} of the days under `root`.

  Raises:
    ConfigError: `root` does not exist or holds no dated partitions.
  """
  try:
    entries = tf.io.gfile.listdir(root)
  except tf.errors.NotFoundError:
    entries = None
  if entries is None:
    raise errors.ConfigError(f"{name}={root}: no such directory; want the "
                             "root of the days")
  folders, named = {}, {}
  for entry in entries:
    match = _FOLDER.match(entry)
    if match and _date(match.group(1)):
      folders[_date(match.group(1))] = _folder(root, entry)
      continue
    match = _DATE_IN_NAME.search(entry)
    if match and _date(match.group(1)) and _data_files([entry]):
      named.setdefault(_date(match.group(1)), []).append(
          os.path.join(root, entry))
  if not folders and not named:
    raise errors.ConfigError(
        f"{name}={root} holds no dated partitions: want folders "
        "day=YYYY-MM-DD/ (as Spark's partitionBy writes them) or files "
        "with the date in their names (clicks-2026-01-01.tfrecord); it "
        f"holds {sorted(entries)[:5]}")
  markers = any(success for _, success in folders.values())
  found = {day: Partition(day, files, bool(files) and (success or
                                                       not markers))
           for day, (files, success) in folders.items()}
  for day, files in named.items():
    if day not in found:
      found[day] = Partition(day, tuple(sorted(files)), True)
  return found


def check_days(root, first, last, follow, name="train_data"):
  """Refuses up front a day of a closed range not landed and not waited for.

  Raises:
    ConfigError: naming the days `root` holds.
  """
  found = partitions(root, name)
  if follow:
    return
  if last is None:
    raise errors.ConfigError(
        f"days={first}: (no last day) needs follow=True, to wait for each "
        f"day as it lands; or give the last day, e.g. days={first}:"
        f"{max(found)}")
  landed = sorted(day for day, p in found.items() if p.landed)
  missing = [str(day) for day in each_day(first, last)
             if day not in landed]
  if missing:
    raise errors.ConfigError(
        f"{name}={root} has no complete partition for the day(s) "
        f"{', '.join(missing[:5])} of days={first}:{last}; it holds "
        f"{_spans(landed)}: train days within them, or pass follow=True "
        "to wait for the missing ones")


def _spans(days):
  """'2026-01-01..2026-01-03, 2026-01-05' for a sorted list of dates."""
  if not days:
    return "no complete day"
  runs, start = [], days[0]
  for before, day in zip(days, days[1:] + [None]):
    if day is None or (day - before).days != 1:
      runs.append(str(start) if start == before else f"{start}..{before}")
      start = day
  return ", ".join(runs)


def each_day(first, last):
  """The dates from `first` to `last`, both included."""
  return [first + datetime.timedelta(days=n)
          for n in range((last - first).days + 1)]


def landed(root, day, name="train_data"):
  """`day`'s Partition if landed, else None; reads that day's folder alone
  where it can (a root may hold years)."""
  folder = f"day={day}"
  if tf.io.gfile.isdir(os.path.join(root, folder)):
    files, success = _folder(root, folder)
    if success:
      return Partition(day, files, True)
    if not files:
      return None
  partition = partitions(root, name).get(day)
  return partition if partition and partition.landed else None


def wait_for(root, day, timeout_secs, name="train_data"):
  """`day`'s Partition once it lands, or None after `timeout_secs`."""
  deadline = time.time() + timeout_secs
  partition = landed(root, day, name)
  if partition is None:
    logging.info("days: waiting up to %d s for day %s: %s/day=%s/%s (or a "
                 "file named with the date)", timeout_secs, day, root, day,
                 SUCCESS)
  while partition is None and time.time() < deadline:
    time.sleep(min(POLL_SECS, max(deadline - time.time(), 0)))
    partition = landed(root, day, name)
  return partition


def count_records(partition, model_dir, worker, skip_corrupt=False):
  """Records of a day: TFRecords counted once and kept, CSV lines each time."""
  files = list(partition.files)
  if data_files.is_csv(files):
    lines = tf.data.Dataset.from_tensor_slices(files).flat_map(
        lambda path: tf.data.TextLineDataset(path).skip(1))
    return int(position.count(lines).numpy())
  counts = file_shards.Counts(files, model_dir, worker, skip_corrupt)
  counts.count(range(len(files)))
  counts.freeze()
  return sum(counts(n) for n in range(len(files)))


def span(start_step, records, global_batch_size, divisor):
  """The `position.Span` of a day of `records` from update `start_step`,
  rounded down to a multiple of `divisor`.

  Raises:
    DataError: a day without records.
  """
  remainder = records % global_batch_size
  examples = records - remainder % divisor
  if examples <= 0:
    raise errors.DataError(
        f"a day of {records} record(s) cannot fill one update of "
        f"{divisor} examples or more")
  return position.Span(start_step, records, examples)


def updates(day_span, global_batch_size):
  """The updates that train `day_span`."""
  return math.ceil(day_span.examples / global_batch_size)


"""Days of tiny click logs, as Spark lays them out: ROOT/day=YYYY-MM-DD/.

Each example has a unique `id` (the day's number x 100000 + its index), so
a test can count how often each was trained, and a label drawn from a
planted logistic model of `x`, so that a model learns and its AUC on the
next day means something.
"""
import datetime
import os

import numpy as np

import estimator_scale as es

WEIGHTS = np.array([2.0, -1.5, 1.0, 0.5], np.float32)


def ids_of(day_number, examples):
  return list(range(day_number * 100000, day_number * 100000 + examples))


def write_day(root, day, day_number, examples, success=True, shards=2):
  """Writes one day's TFRecords (and its _SUCCESS); returns its ids."""
  rng = np.random.default_rng(day_number)
  x = rng.normal(size=(examples, 4)).astype(np.float32)
  clicked = rng.random(examples) < 1 / (1 + np.exp(-x @ WEIGHTS))
  ids = np.array(ids_of(day_number, examples), np.int64)
  folder = os.path.join(root, f"day={day}")
  es.inputs.write_tfrecord_shards({"x": x, "id": ids},
                                  clicked.astype(np.int64), folder, shards)
  if success:
    mark_landed(root, day)
  return ids.tolist()


def mark_landed(root, day):
  with open(os.path.join(root, f"day={day}", "_SUCCESS"), "w"):
    pass


def write_days(root, first, sizes, success=True):
  """Writes a day per size from `first` (a date); {day string: ids}."""
  written = {}
  for number, examples in enumerate(sizes):
    day = first + datetime.timedelta(days=number)
    written[str(day)] = write_day(root, day, number + 1, examples, success)
  return written

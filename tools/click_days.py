"""Days of generated click logs laid out as Spark writes a partition per day.

`ROOT/day=YYYY-MM-DD/part-NNNNN.parquet` (or `.tfrecord`), then the day's
`_SUCCESS`, written last as Spark writes it, so that a reader waiting for the
marker (`--follow`, the Parquet converter) never takes half a day.

The columns are `model_zoo.click_data`'s: `label`, I1..I13 as float32 and
C1..C26 as int64, a missing value being a null (Parquet) or left out of the
record (TFRecord), so that the converted records parse with `wide_deep`'s
feature spec as its own TFRecords do. Each row also carries `id`, unique over
the days, which a model does not read: it lets a test, or a person, count
how often each example was trained.
"""
import datetime
import os

import numpy as np

from model_zoo import click_data

FORMATS = ("parquet", "tfrecord")
SUCCESS = "_SUCCESS"
ID = "id"
ID_STRIDE = 10**7
"""A day's ids are its day number since 1970-01-01 times this, plus the row;
days hold fewer rows."""


def ids(day, rows):
  """The `id` column of a day of `rows` rows: unique over every day."""
  if rows >= ID_STRIDE:
    raise ValueError(f"rows={rows}: a day holds fewer than {ID_STRIDE} rows")
  start = (day - datetime.date(1970, 1, 1)).days * ID_STRIDE
  return np.arange(start, start + rows, dtype=np.int64)


def _parquet_table(features, labels, day_ids):
  """The day as an Arrow table; NaN counts and -1 ids are nulls."""
  import pyarrow as pa  # pylint: disable=g-import-not-at-top
  columns = {click_data.LABEL: pa.array(labels, pa.int64()),
             ID: pa.array(day_ids, pa.int64())}
  for name in click_data.NUMERIC:
    values = features[name]
    columns[name] = pa.array(values, pa.float32(), mask=np.isnan(values))
  for name in click_data.CATEGORICAL:
    values = features[name]
    columns[name] = pa.array(values, pa.int64(), mask=values < 0)
  # The label and id are never null: a record without them must not parse.
  fields = [pa.field(name, array.type,
                     nullable=name not in (click_data.LABEL, ID))
            for name, array in columns.items()]
  return pa.table(list(columns.values()), schema=pa.schema(fields))


def _write_parquet(folder, shards, features, labels, day_ids):
  import pyarrow.parquet as pq  # pylint: disable=g-import-not-at-top
  table = _parquet_table(features, labels, day_ids)
  bounds = np.linspace(0, table.num_rows, shards + 1).astype(int)
  for shard, (begin, end) in enumerate(zip(bounds, bounds[1:])):
    pq.write_table(table.slice(begin, end - begin),
                   os.path.join(folder, f"part-{shard:05d}.parquet"))


def _write_tfrecord(folder, shards, features, labels, day_ids):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  bounds = np.linspace(0, len(labels), shards + 1).astype(int)
  for shard, (begin, end) in enumerate(zip(bounds, bounds[1:])):
    path = os.path.join(folder, f"part-{shard:05d}.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
      for i in range(begin, end):
        record = click_data.example(features, labels[i], i)
        record.features.feature[ID].int64_list.value.append(day_ids[i])
        writer.write(record.SerializeToString())


def write_day(root, day, rows, seed=0, file_format="parquet", shards=2,
              success=True, **click_options):
  """Writes one day's partition under `root`; returns its ids.

  Args:
    root: the root of the days.
    day: a datetime.date.
    rows: examples of the day.
    seed: the planted model's; each day draws its own examples.
    file_format: one of FORMATS.
    shards: files of the day.
    success: write the `_SUCCESS` marker; without it the day reads as
      still being written, until `mark_landed`.
    **click_options: vocabulary, zipf_exponent, raw_ids of
      `click_data.generate_day`.

  Raises:
    ValueError: an argument out of range, named with what is valid.
  """
  if file_format not in FORMATS:
    raise ValueError(f"format={file_format!r}: valid: {', '.join(FORMATS)}")
  if rows < 1 or shards < 1:
    raise ValueError(f"rows={rows}, shards={shards}: want 1 or more each")
  features, labels, _ = click_data.generate_day(day, rows, seed,
                                                **click_options)
  day_ids = ids(day, rows)
  folder = os.path.join(root, f"day={day}")
  os.makedirs(folder, exist_ok=True)
  write = _write_parquet if file_format == "parquet" else _write_tfrecord
  write(folder, min(shards, rows), features, labels, day_ids)
  if success:
    mark_landed(root, day)
  return day_ids.tolist()


def mark_landed(root, day):
  """Writes `day`'s `_SUCCESS`: its files are all there."""
  with open(os.path.join(root, f"day={day}", SUCCESS), "w",
            encoding="utf-8"):
    pass


def write_days(root, first, last, rows, seed=0, **options):
  """Writes each day from `first` to `last` (dates); {day string: ids}."""
  written = {}
  day = first
  while day <= last:
    written[str(day)] = write_day(root, day, rows, seed, **options)
    day += datetime.timedelta(days=1)
  return written

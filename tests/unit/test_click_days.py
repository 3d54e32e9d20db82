"""Days of generated click logs (tools/click_days.py): Parquet converted by
estimator-scale-parquet must reach wide_deep as its own TFRecords do.

Both formats of one day are parsed with wide_deep's own parse spec, record
by record (matched by `id`), so a dtype, a name or a null that the
converter wrote another way than click_data's writer would show here
rather than as a model that trains on something else.
"""
import datetime
import glob
import os

import numpy as np
import tensorflow as tf

from estimator_scale.inputs import days as days_lib
from estimator_scale.parquet import convert
from model_zoo import click_data
from model_zoo import wide_deep
from tools import click_days
from tools import click_logs

_DAY = datetime.date(2026, 1, 1)


def _parsed(pattern):
  """{id: {feature: values}} of the records under `pattern`."""
  spec = dict(wide_deep.parse_spec(), id=tf.io.FixedLenFeature([], tf.int64))
  rows = {}
  for record in tf.data.TFRecordDataset(sorted(glob.glob(pattern))):
    parsed = tf.io.parse_single_example(record, spec)
    values = {name: (tf.sparse.to_dense(t) if isinstance(t, tf.SparseTensor)
                     else t).numpy().tolist() for name, t in parsed.items()}
    rows[values.pop("id")] = values
  return rows


def test_converted_parquet_parses_as_the_tfrecords_of_the_same_day(tmp_path):
  ids = click_days.write_day(str(tmp_path / "pq"), _DAY, 40)
  assert ids == click_days.write_day(str(tmp_path / "tf"), _DAY, 40,
                                     file_format="tfrecord")
  convert.convert(str(tmp_path / "pq"), str(tmp_path / "out"), processes=1,
                  log=lambda line: None)
  converted = _parsed(str(tmp_path / "out" / "day=2026-01-01" / "*.tfrecord"))
  written = _parsed(str(tmp_path / "tf" / "day=2026-01-01" / "*.tfrecord"))
  assert sorted(converted) == ids
  assert converted == written
  missing = [row[name] for row in written.values()
             for name in click_data.CATEGORICAL if not row[name]]
  assert missing, "no missing id in 40 rows: nulls are not exercised"
  # The spec the converter writes at the root is not read as a day.
  assert list(days_lib.partitions(str(tmp_path / "out"))) == [_DAY]


def test_each_day_draws_its_own_rows_from_one_planted_model():
  first, labels, _ = click_data.generate_day(_DAY, 500)
  again, _, _ = click_data.generate_day(_DAY, 500)
  other, _, _ = click_data.generate_day(_DAY + datetime.timedelta(1), 500)
  assert np.array_equal(first["C1"], again["C1"])
  assert not np.array_equal(first["C1"], other["C1"])
  assert 0.1 < labels.mean() < 0.4  # click_data's rate of clicks
  assert click_days.ids(_DAY, 3)[0] != click_days.ids(
      _DAY + datetime.timedelta(1), 3)[0]


def test_command_writes_a_partition_per_day_then_its_marker(tmp_path, capsys):
  click_logs.main(["--days=2026-01-01:2026-01-02", "--rows_per_day=8",
                   "--files_per_day=2", f"--data_dir={tmp_path}"])
  assert sorted(os.listdir(tmp_path)) == ["day=2026-01-01", "day=2026-01-02"]
  assert sorted(os.listdir(tmp_path / "day=2026-01-02")) == [
      "_SUCCESS", "part-00000.parquet", "part-00001.parquet"]
  assert f"{tmp_path}/day=2026-01-01: 8 rows (parquet)" in capsys.readouterr().out

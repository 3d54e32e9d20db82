"""estimator-scale-parquet: Parquet in, TFRecords that es.inputs reads out.

Values go through the converter and back through `es.inputs.from_tfrecords`
with the spec it wrote, so what is checked is what training would see:
scalars, lists, strings and nulls, partition by partition, and the errors
that name the file and column the converter cannot take.
"""
import math
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale import errors
from estimator_scale import parquet as es_parquet
from estimator_scale.parquet import convert
from estimator_scale.parquet import segments
from estimator_scale.parquet import tfrecord
from tests.helpers.processes import PYTHON, run
from tools.bench import parquet_memory

_ROWS = [
    # id, label, price (float64, null), clicked (bool), name (string, null),
    # ids (list, null list), weights (list of floats), words (list of
    # strings), pair (fixed-size list), day (date)
    (0, 1, 1.5, True, "ab", [1, -2, 1 << 40], [0.5], ["x", "yé"], [1, 2], 19000),
    (1, 0, None, False, None, None, [], [], [3, 4], 19001),
    (2, 1, -0.25, True, "", [], [1.0, 2.0], ["z"], [5, 6], 19002),
    (3, 0, 1e10, False, "c" * 300, [(1 << 63) - 1], None, None, [7, 8], 0),
    (4, 1, 0.0, True, "d", [0], [3.0], ["w" * 200], [9, 10], 19004),
]
_COLUMNS = ("id", "label", "price", "clicked", "name", "ids", "weights",
            "words", "pair", "day")
_TYPES = (pa.int64(), pa.int64(), pa.float64(), pa.bool_(), pa.string(),
          pa.list_(pa.int64()), pa.list_(pa.float32()), pa.list_(pa.string()),
          pa.list_(pa.int32(), 2), pa.date32())


def _table(rows=_ROWS):
  columns = list(zip(*rows))
  return pa.table({name: pa.array(values, arrow_type) for name, values,
                   arrow_type in zip(_COLUMNS, columns, _TYPES)})


def _write(path, table, row_group_size=2):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  pq.write_table(table, path, row_group_size=row_group_size)


def _convert(source, output, **kwargs):
  lines = []
  done = convert.convert(str(source), str(output), processes=1, log=lines.append,
                         **kwargs)
  return done, lines


def _read_back(pattern, output):
  """{id: {feature: value}} of every record, read as training reads them."""
  spec = es_parquet.feature_spec(str(output))
  fn = es.inputs.from_tfrecords(str(pattern), spec, "label", 4,
                                training=False)
  rows = {}
  for features, labels in fn():
    values = {}
    for name, tensor in features.items():
      if isinstance(tensor, tf.SparseTensor):
        values[name] = tf.RaggedTensor.from_sparse(tensor).to_list()
      else:
        values[name] = tensor.numpy().tolist()
    for i, row_id in enumerate(values["id"]):
      rows[row_id] = {name: column[i] for name, column in values.items()}
      rows[row_id]["label"] = labels.numpy()[i]
  return rows


def test_values_read_back_as_written_nulls_as_the_spec_says(tmp_path):
  _write(str(tmp_path / "in" / "a.parquet"), _table())
  _convert(tmp_path / "in", tmp_path / "out")
  rows = _read_back(tmp_path / "out" / "*.tfrecord", tmp_path / "out")
  assert sorted(rows) == [0, 1, 2, 3, 4]
  for row in _ROWS:
    got = rows[row[0]]
    want = dict(zip(_COLUMNS, row))
    assert got["label"] == want["label"]
    price = 0.0 if want["price"] is None else want["price"]  # a null: default
    assert math.isclose(got["price"], price, rel_tol=1e-6)
    assert got["clicked"] == int(want["clicked"])
    assert got["name"] == (want["name"] or "").encode()
    assert got["ids"] == (want["ids"] or [])  # a null list: empty
    assert got["weights"] == (want["weights"] or [])
    assert got["words"] == [w.encode() for w in want["words"] or []]
    assert got["pair"] == want["pair"]
    assert got["day"] == want["day"]  # days since 1970-01-01


def test_spec_says_kind_dtype_shape_and_default(tmp_path):
  _write(str(tmp_path / "in" / "a.parquet"), _table())
  _convert(tmp_path / "in", tmp_path / "out")
  spec = es_parquet.feature_spec(str(tmp_path / "out" / "feature_spec.json"))
  assert spec["price"] == tf.io.FixedLenFeature([], tf.float32, 0.0)
  assert spec["name"] == tf.io.FixedLenFeature([], tf.string, b"")
  assert spec["pair"] == tf.io.FixedLenFeature([2], tf.int64)
  assert spec["ids"] == tf.io.VarLenFeature(tf.int64)
  assert spec["words"] == tf.io.VarLenFeature(tf.string)


def test_frames_and_checksums_match_tensorflow_s_writer(tmp_path):
  records = [b"", b"a", b"ab", bytes(range(256)) * 3, b"odd" * 333]
  data = np.frombuffer(b"".join(records), np.uint8)
  lengths = np.array([len(r) for r in records], np.int64)
  framed = tfrecord.frame(segments.Segments(
      [segments.array(data, lengths)], lengths))
  path = str(tmp_path / "want.tfrecord")
  with tf.io.TFRecordWriter(path) as writer:
    for record in records:
      writer.write(record)
  with open(path, "rb") as f:
    assert framed.tobytes() == f.read()


def _partitions(root, days=("2024-05-01", "2024-05-02")):
  for day, rows in zip(days, (_ROWS[:3], _ROWS[3:])):
    _write(os.path.join(root, f"day={day}", "part-0.parquet"), _table(rows))
    _write(os.path.join(root, f"day={day}", "_SUCCESS.parquet"), _table(rows))


def test_partitions_convert_once_and_an_unfinished_one_again(tmp_path):
  source, output = tmp_path / "in", tmp_path / "out"
  _partitions(str(source))
  done, _ = _convert(source, output)
  assert done == {"day=2024-05-01": 3, "day=2024-05-02": 2}  # _* skipped
  for day in ("day=2024-05-01", "day=2024-05-02"):
    assert sorted(os.listdir(output / day)) == ["_SUCCESS", "part-00000.tfrecord"]
  first = output / "day=2024-05-01" / "part-00000.tfrecord"
  written = first.stat().st_mtime_ns

  done, lines = _convert(source, output)
  assert done == {"day=2024-05-01": None, "day=2024-05-02": None}
  assert "day=2024-05-01: already converted (_SUCCESS there), skipped" in lines

  # Killed mid-partition: no marker, a stray temporary and a stale file.
  os.remove(output / "day=2024-05-02" / convert.MARKER)
  (output / "day=2024-05-02" / ".part-00003.tfrecord.tmp-99").write_bytes(b"x")
  (output / "day=2024-05-02" / "part-00003.tfrecord").write_bytes(b"x")
  done, _ = _convert(source, output)
  assert done == {"day=2024-05-01": None, "day=2024-05-02": 2}
  assert first.stat().st_mtime_ns == written
  assert sorted(os.listdir(output / "day=2024-05-02")) == [
      "_SUCCESS", "part-00000.tfrecord"]
  rows = _read_back(output / "day=*" / "*.tfrecord", output)
  assert sorted(rows) == [0, 1, 2, 3, 4]


def test_a_day_spark_is_still_writing_waits_for_its_marker(tmp_path):
  source, output = tmp_path / "in", tmp_path / "out"
  _partitions(str(source))
  (source / "day=2024-05-01" / "_SUCCESS").write_bytes(b"")
  done, lines = _convert(source, output)
  assert done == {"day=2024-05-01": 3}
  assert not (output / "day=2024-05-02").exists()
  assert lines[0].startswith("day=2024-05-02: no _SUCCESS in the input yet")

  (source / "day=2024-05-02" / "_SUCCESS").write_bytes(b"")
  done, _ = _convert(source, output)
  assert done == {"day=2024-05-01": None, "day=2024-05-02": 2}


def test_one_big_file_is_cut_over_the_processes(tmp_path):
  _write(str(tmp_path / "a.parquet"), _table(), row_group_size=1)
  tasks = convert._tasks(convert.Partition("", (str(tmp_path / "a.parquet"),)),
                         {}, "fill", str(tmp_path), processes=2)
  assert [(t.first, t.end) for t in tasks] == [(0, 3), (3, 5)]


@pytest.mark.parametrize("arrow_type,what", [
    (pa.struct([("a", pa.int64())]), "a nested struct"),
    (pa.map_(pa.string(), pa.int64()), "a map"),
    (pa.list_(pa.list_(pa.int64())), "a list of lists"),
])
def test_nested_columns_are_refused_by_file_and_name(tmp_path, arrow_type,
                                                      what):
  path = str(tmp_path / "a.parquet")
  pq.write_table(pa.table({"ok": [1], "deep": pa.array([None], arrow_type)}),
                 path)
  with pytest.raises(errors.DataError) as raised:
    _convert(path, tmp_path / "out")
  assert f"{path}: column 'deep' is" in str(raised.value)
  assert what in str(raised.value)


def test_files_of_a_partition_must_share_a_schema(tmp_path):
  day = tmp_path / "in" / "day=2024-05-01"
  _write(str(day / "a.parquet"), _table())
  _write(str(day / "b.parquet"), _table().set_column(
      2, "price", pa.array(["1"] * 5)))
  with pytest.raises(errors.DataError, match=(
      r"b\.parquet: column 'price' is a string scalar \(string\) where "
      r".*a\.parquet has a float32 scalar \(double\); one partition's files "
      "must share a schema")):
    _convert(tmp_path / "in", tmp_path / "out")
  _write(str(day / "b.parquet"), _table().drop(["name"]))
  with pytest.raises(errors.DataError, match="b.parquet: no column 'name'"):
    _convert(tmp_path / "in", tmp_path / "out")


def test_no_parquet_files_names_the_input(tmp_path):
  (tmp_path / "day=2024-05-01").mkdir()
  with pytest.raises(errors.DataError,
                     match=f"input={tmp_path}: no .parquet files"):
    _convert(tmp_path, tmp_path / "out")


def test_nulls_refused_name_the_column(tmp_path):
  _write(str(tmp_path / "a.parquet"), _table())
  with pytest.raises(errors.DataError, match=(
      r"a\.parquet, row group 0, column 'price': 1 null value\(s\)")):
    _convert(tmp_path / "a.parquet", tmp_path / "out", nulls="refuse")
  assert not (tmp_path / "out" / convert.MARKER).exists()


def test_command_converts_with_a_pool_and_imports_no_tensorflow(tmp_path):
  _partitions(str(tmp_path / "in"))
  proc = run([PYTHON, "-X", "importtime", "-m", "estimator_scale.parquet",
              f"--input={tmp_path / 'in'}", f"--output={tmp_path / 'out'}",
              "--processes=2"])
  assert "day=2024-05-02: 2 records from 1 file(s)" in proc.stdout
  imported = [line.rsplit("|", 1)[1].strip()
              for line in proc.stderr.splitlines()
              if line.startswith("import time:") and "[us]" not in line]
  assert "pyarrow" in imported
  assert not [name for name in imported if name.startswith("tensorflow")]
  proc = run([PYTHON, "-m", "estimator_scale.parquet", "--input=/nonexistent",
              f"--output={tmp_path / 'out'}"], check=False)
  assert proc.returncode == 2
  assert proc.stderr.strip() == ("estimator-scale-parquet: error: "
                                 "input=/nonexistent: no such file or folder")


def test_importing_the_package_loads_no_pyarrow():
  proc = run([PYTHON, "-c", "import sys, estimator_scale, estimator_scale."
              "parquet; print(sorted(m for m in sys.modules if m.split('.')[0]"
              " in ('pyarrow', 'tensorflow')))"])
  assert proc.stdout.strip() == "[]"


def test_memory_bench_measures_a_small_file(capsys):
  ratio = parquet_memory.main(["--gigabytes=0.001", "--row_group_rows=2000"])
  out = capsys.readouterr().out
  assert "rows in 2 row groups of 2000 rows" in out
  assert "peak RSS, largest process: " in out
  assert ratio > 1  # the interpreter alone outweighs a row group this small

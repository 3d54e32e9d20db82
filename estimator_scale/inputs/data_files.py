"""A model's data from the user's files: TFRecord or CSV, by feature spec."""
import contextlib

import numpy as np
import tensorflow as tf

from estimator_scale import errors
from estimator_scale import filesystems
from estimator_scale.inputs import input_fn as input_fn_lib
from estimator_scale.inputs import readers


def csv_columns(name, feature):
  """The CSV header names of one feature: its name, or name_i per value."""
  size = int(np.prod(list(feature.shape), dtype=np.int64))
  return [name] if size == 1 else [f"{name}_{i}" for i in range(size)]


def _column_default(feature):
  return [0] if feature.dtype.is_integer else [0.0]


def from_csv_features(pattern, feature_spec, label_key, global_batch_size,
                      **kwargs):
  """input_fn over CSV files whose header names the feature spec's columns
  (the first file's order; extra columns dropped)."""
  files = readers.list_files(pattern, "CSV pattern")
  with tf.io.gfile.GFile(files[0]) as f:
    header = f.readline().strip().split(",")
  wanted = {name: csv_columns(name, feature)
            for name, feature in feature_spec.items()}
  missing = [c for columns in wanted.values() for c in columns
             if c not in header]
  if missing:
    raise errors.DataError(
        f"{files[0]}: the header lacks the columns {missing[:5]}"
        f"{' ...' if len(missing) > 5 else ''} of the model's feature "
        f"spec; it has {header[:5]}{' ...' if len(header) > 5 else ''}")
  types = {c: feature_spec[name] for name, columns in wanted.items()
           for c in columns}
  defaults = [_column_default(types[c]) if c in types else [""]
              for c in header]
  readers.check_csv(files, len(header))

  def parse_line(line):
    values = dict(zip(header, tf.io.decode_csv(line, defaults)))
    features = {}
    for name, columns in wanted.items():
      feature = feature_spec[name]
      stacked = tf.stack([values[c] for c in columns], axis=-1)
      features[name] = tf.cast(tf.reshape(stacked, list(feature.shape)),
                               feature.dtype)
    if label_key is None:
      return features
    return features, features.pop(label_key)

  return readers.from_csv_lines(files, parse_line, global_batch_size,
                                header=True, **kwargs)


def is_csv(pattern):
  """Whether a glob (or every path of a list) names CSV files."""
  if isinstance(pattern, (list, tuple)):
    return bool(pattern) and all(is_csv(path) for path in pattern)
  return pattern.lower().endswith(".csv")


def from_files(pattern, feature_spec, label_key, global_batch_size,
               skip_corrupt=False, **kwargs):
  """input_fn over TFRecord or CSV files (a `.csv` pattern means CSV);
  arguments as `readers.from_tfrecords`."""
  for path in pattern if isinstance(pattern, (list, tuple)) else [pattern]:
    filesystems.require("pattern", path)
  if is_csv(pattern):
    if skip_corrupt:
      raise errors.ConfigError("skip_corrupt applies to TFRecord files; "
                               f"{pattern!r} names CSV files")
    return from_csv_features(pattern, feature_spec, label_key,
                             global_batch_size, **kwargs)
  return readers.from_tfrecords(pattern, feature_spec, label_key,
                                global_batch_size, skip_corrupt=skip_corrupt,
                                **kwargs)


def write_csv(features, labels, path, feature_spec, label_key="label"):
  """Writes {name: array} and labels as one CSV file with `csv_columns`."""
  columns = dict(features)
  if labels is not None:
    columns[label_key] = labels
  header, blocks = [], []
  for name, array in columns.items():
    header += csv_columns(name, feature_spec[name])
    blocks.append(np.asarray(array).reshape(len(array), -1))
  rows = np.concatenate([b.astype(object) for b in blocks], axis=1)
  with tf.io.gfile.GFile(path, "w") as f:
    f.write(",".join(header) + "\n")
    for row in rows:
      f.write(",".join(str(v) for v in row) + "\n")


def _first_unreadable(files):
  """(path, error) of the first file tf.data cannot read to its end."""
  for path in files:
    try:
      for _ in tf.data.TFRecordDataset(path):
        pass
    except tf.errors.DataLossError as e:
      return path, e
  return None, None


def files_of(input_fn):
  """The files an input_fn reads: an `InputFn`'s `files`, else ()."""
  return input_fn.files if isinstance(input_fn, input_fn_lib.InputFn) else ()


@contextlib.contextmanager
def naming_corrupt_files(files):
  """A DataLossError from reading `files` as a DataError naming the file
  (TF names none); files are scanned only after a failure."""
  try:
    yield
  except tf.errors.DataLossError as e:
    path, error = _first_unreadable(files)
    if path is None:
      raise
    raise errors.DataError(
        f"{path}: {error.message}; the file is corrupt or truncated: "
        "replace it, or skip unreadable records with skip_corrupt=True "
        "(the CLI's --skip_corrupt_records)") from e

"""The feature spec written beside converted data, and read back for training.

The spec is JSON, not pickled TensorFlow objects, so that the converter never
imports TensorFlow, a person can read (and edit: a null's default) what was
written, and any version of the framework reads it. This module imports
neither pyarrow nor TensorFlow until `feature_spec` builds TensorFlow's spec.
"""
import dataclasses
import json
import os

from estimator_scale import errors

SPEC_FILE = "feature_spec.json"
"""Its name in the output root."""

FORMAT = "estimator_scale.parquet/1"

FIXED = "fixed"
"""One value per record (or a fixed number: `shape`): tf.io.FixedLenFeature."""
VAR_LEN = "var_len"
"""Any number of values per record: tf.io.VarLenFeature (a SparseTensor)."""

DTYPES = ("int64", "float32", "string")
"""What a tf.train.Example holds: Int64List, FloatList, BytesList."""


@dataclasses.dataclass(frozen=True)
class Feature:
  """One column as a feature of the records.

  Attributes:
    kind: FIXED or VAR_LEN.
    dtype: one of DTYPES, named as TensorFlow names it.
    shape: a FIXED feature's shape: [] for a scalar, [n] for a fixed-size
      list; None for VAR_LEN.
    default: what parsing gives a record that lacks the feature (the column
      was null there); None when the column cannot be null.
    arrow_type: the Parquet column's Arrow type, to tell where a value came
      from (a float64 became float32, a timestamp its integer count).
  """
  kind: str
  dtype: str
  shape: list = None
  default: object = None
  arrow_type: str = ""

  def same_values(self, other):
    """Whether records of both read the same way (a default may differ)."""
    return (self.kind, self.dtype, self.shape) == (other.kind, other.dtype,
                                                    other.shape)

  def describe(self):
    if self.kind == VAR_LEN:
      return f"a variable-length list of {self.dtype}"
    if self.shape:
      return f"{self.shape[0]} {self.dtype} values"
    return f"a {self.dtype} scalar"


def write(directory, features):
  """Writes {name: Feature} as the spec of `directory`, atomically (a reader
  never sees half a file)."""
  path = os.path.join(directory, SPEC_FILE)
  text = json.dumps({"format": FORMAT,
                     "features": {name: dataclasses.asdict(feature)
                                  for name, feature in features.items()}},
                    indent=2)
  temporary = f"{path}.tmp-{os.getpid()}"
  with open(temporary, "w", encoding="utf-8") as f:
    f.write(text + "\n")
  os.replace(temporary, path)
  return path


def read(path):
  """{name: Feature} from a spec file, or from the output root holding one."""
  if os.path.isdir(path):
    path = os.path.join(path, SPEC_FILE)
  try:
    with open(path, encoding="utf-8") as f:
      text = json.load(f)
  except FileNotFoundError:
    raise errors.DataError(
        f"path={path}: no feature spec there; give the converter's output "
        f"root or its {SPEC_FILE}") from None
  except json.JSONDecodeError as e:
    raise errors.DataError(f"path={path}: not a feature spec ({e})") from None
  if text.get("format") != FORMAT:
    raise errors.DataError(
        f"path={path}: format {text.get('format')!r}, want {FORMAT!r}")
  return {name: Feature(**entry) for name, entry in text["features"].items()}


def feature_spec(path):
  """The `feature_spec` that `es.inputs.from_tfrecords` takes, for data that
  `estimator-scale-parquet` wrote.

  Args:
    path: the converter's output root, or its feature_spec.json.

  Returns:
    {name: tf.io.FixedLenFeature or tf.io.VarLenFeature}; pop the label's
    name from it or pass it as `label_key`.

  Raises:
    DataError: `path` holds no spec written by the converter.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  spec = {}
  for name, feature in read(path).items():
    dtype = tf.as_dtype(feature.dtype)
    if feature.kind == VAR_LEN:
      spec[name] = tf.io.VarLenFeature(dtype)
    else:
      default = feature.default
      if isinstance(default, str):
        default = default.encode()
      spec[name] = tf.io.FixedLenFeature(feature.shape, dtype, default)
  return spec

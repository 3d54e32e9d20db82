"""The feature spec written beside converted data, read back for training;
JSON, so the converter needs no TensorFlow."""
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
  """One column as a feature: `kind` FIXED (`shape` [] or [n]) or VAR_LEN;
  `default` for records without it (None: never null)."""
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
  """Writes {name: Feature} as the spec of `directory`, atomically."""
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
  """The `feature_spec` for `es.inputs.from_tfrecords` of the data under `path`.

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

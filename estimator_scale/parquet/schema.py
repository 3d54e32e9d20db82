"""The feature spec inferred from a Parquet schema, and the checks on it;
nested columns are refused by name before any record is written."""
import pyarrow as pa

from estimator_scale import errors
from estimator_scale.parquet import spec

NULLS = ("fill", "refuse")
"""What a null becomes: `fill` leaves the feature out of that record and the
spec gives the column a default (0, 0.0 or ""), which parsing puts there; a
null list is left out too, which a variable-length feature reads as an empty
list. `refuse` stops at the first null, naming its column. A null fixed-size
list is refused either way: it has no default of its shape."""

DEFAULTS = {"int64": 0, "float32": 0.0, "string": ""}

_SUPPORTED = ("integers, floats, booleans, strings, binary, dates and times, "
              "and lists or fixed-size lists of those")


def is_temporal(arrow_type):
  """Dates, times and spans: written as their integer count."""
  return (pa.types.is_timestamp(arrow_type) or pa.types.is_date(arrow_type)
          or pa.types.is_time(arrow_type) or pa.types.is_duration(arrow_type))


def _binary(arrow_type):
  return (pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
          or pa.types.is_binary(arrow_type)
          or pa.types.is_large_binary(arrow_type)
          or pa.types.is_fixed_size_binary(arrow_type))


def scalar_dtype(arrow_type):
  """The Example dtype of a scalar Arrow type, or None (dates: int count)."""
  if pa.types.is_dictionary(arrow_type):
    arrow_type = arrow_type.value_type
  if pa.types.is_boolean(arrow_type) or pa.types.is_integer(arrow_type):
    return "int64"
  if is_temporal(arrow_type):
    return "int64"
  if pa.types.is_floating(arrow_type):
    return "float32"
  if _binary(arrow_type):
    return "string"
  return None


def _unsupported(where, field, why):
  return errors.DataError(
      f"{where}: column '{field.name}' is {field.type}, {why}; a record "
      f"holds {_SUPPORTED}: flatten the column (a struct into one column "
      "per field) or leave it out before converting")


def feature(field, nulls, where):
  """The `spec.Feature` of a pyarrow.Field.

  Raises:
    DataError: the column's type has no place in a tf.train.Example.
  """
  arrow_type = field.type
  if pa.types.is_struct(arrow_type):
    raise _unsupported(where, field, "a nested struct")
  if pa.types.is_map(arrow_type):
    raise _unsupported(where, field, "a map")
  if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
    dtype = scalar_dtype(arrow_type.value_type)
    if dtype is None:
      raise _unsupported(where, field, "a list of lists or of structs")
    return spec.Feature(spec.VAR_LEN, dtype, arrow_type=str(arrow_type))
  if pa.types.is_fixed_size_list(arrow_type):
    dtype = scalar_dtype(arrow_type.value_type)
    if dtype is None:
      raise _unsupported(where, field, "a list of lists or of structs")
    return spec.Feature(spec.FIXED, dtype, [arrow_type.list_size],
                        arrow_type=str(arrow_type))
  dtype = scalar_dtype(arrow_type)
  if dtype is None:
    raise _unsupported(where, field, "a type with no Example dtype")
  default = DEFAULTS[dtype] if field.nullable and nulls == "fill" else None
  return spec.Feature(spec.FIXED, dtype, [], default, str(arrow_type))


def features(schema, nulls, where):
  """{column name: spec.Feature} of a file's Arrow schema, in its order."""
  names = schema.names
  repeated = sorted({name for name in names if names.count(name) > 1})
  if repeated:
    raise errors.DataError(
        f"{where}: column names {repeated} appear more than once; a feature "
        "name must be unique")
  return {field.name: feature(field, nulls, where) for field in schema}


def check_same(expected, expected_where, found, found_where, scope):
  """Raises unless two files' features read the same.

  Raises:
    DataError: naming the first column missing, extra or read another way.
  """
  for name, feature_ in expected.items():
    other = found.get(name)
    if other is None:
      raise errors.DataError(
          f"{found_where}: no column '{name}', which {expected_where} has; "
          f"{scope} must share a schema")
    if not feature_.same_values(other):
      raise errors.DataError(
          f"{found_where}: column '{name}' is {other.describe()} "
          f"({other.arrow_type}) where {expected_where} has "
          f"{feature_.describe()} ({feature_.arrow_type}); {scope} must "
          "share a schema")
  extra = [name for name in found if name not in expected]
  if extra:
    raise errors.DataError(
        f"{found_where}: column '{extra[0]}' is not in {expected_where}; "
        f"{scope} must share a schema")

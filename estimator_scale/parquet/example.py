"""Arrow record batches as serialized tf.train.Example protos, one per row,
in the wire format directly; a null leaves its feature out."""
import numpy as np
import pyarrow as pa

from estimator_scale import errors
from estimator_scale.parquet import schema
from estimator_scale.parquet import segments as seg
from estimator_scale.parquet import spec

_FIELD_1 = 0x0A  # field 1, length-delimited
_FIELD_2 = 0x12
_FIELD_3 = 0x1A
_FEATURE_TAG = {"string": _FIELD_1, "float32": _FIELD_2, "int64": _FIELD_3}


def _plain(array):
  """`array` without a dictionary, and temporal values as their integers."""
  if pa.types.is_dictionary(array.type):
    array = array.dictionary_decode()
  if schema.is_temporal(array.type):
    array = array.view(pa.int32() if array.type.bit_width == 32 else pa.int64())
  return array


def _numbers(array, dtype, where):
  """A scalar array's values as int64 or float32 (nulls as 0)."""
  if pa.types.is_boolean(array.type):
    array = array.fill_null(False)
  elif array.null_count:
    array = array.fill_null(pa.scalar(0, array.type))
  values = array.to_numpy(zero_copy_only=False)
  if dtype == "float32":
    return values.astype("<f4", copy=False)
  if values.dtype == np.uint64 and values.size and values.max() >= 1 << 63:
    raise errors.DataError(
        f"{where}: a value {values.max()} does not fit an int64 feature; "
        "Example int64 values reach 2^63 - 1")
  return values.astype(np.int64, copy=False)


def _binary(array):
  """A string or binary array's values, one row each."""
  buffers = array.buffers()
  empty = np.zeros(0, np.uint8)
  if pa.types.is_fixed_size_binary(array.type):
    width = array.type.byte_width
    data = np.frombuffer(buffers[1], np.uint8) if buffers[1] else empty
    data = data[array.offset * width:(array.offset + len(array)) * width]
    return seg.of(data, np.full(len(array), width, np.int64))
  wide = pa.types.is_large_string(array.type) or pa.types.is_large_binary(
      array.type)
  offsets = np.frombuffer(buffers[1], np.int64 if wide else np.int32)
  offsets = offsets[array.offset:array.offset + len(array) + 1].astype(np.int64)
  data = np.frombuffer(buffers[2], np.uint8) if buffers[2] else empty
  return seg.of(data[offsets[0]:offsets[-1]], np.diff(offsets))


def _items(values, dtype, where):
  """The payload of a list: packed numbers, or a BytesList field per string."""
  if dtype == "string":
    return seg.message(_FIELD_1, _binary(values))
  numbers = _numbers(values, dtype, where)
  if dtype == "float32":
    return seg.fixed(numbers.view(np.uint8).reshape(len(numbers), 4))
  return seg.varints(numbers)


def _list_message(items, dtype):
  if dtype == "string":
    return items
  return seg.message(_FIELD_1, items)


def _lists(array, feature, where):
  """The *List message of each row of a list column (nulls inside refused)."""
  if pa.types.is_fixed_size_list(array.type):
    values = array.flatten()  # nulls are refused before: lengths stay fixed
    offsets = np.arange(len(array) + 1, dtype=np.int64) * feature.shape[0]
  else:
    offsets = array.offsets.to_numpy().astype(np.int64)
    values = array.values.slice(offsets[0], offsets[-1] - offsets[0])
    offsets -= offsets[0]
  values = _plain(values)
  if values.null_count:
    raise errors.DataError(
        f"{where}: a list holds a null; a list feature holds values only: "
        "drop the nulls from the lists (or fill them) before converting")
  items = _items(values, feature.dtype, where)
  return _list_message(seg.group(items, offsets), feature.dtype)


def _scalars(array, feature, where):
  """The *List message of each row of a scalar column: one value."""
  return _list_message(_items(array, feature.dtype, where), feature.dtype)


def _entry(name, array, feature, nulls, where):
  """Each row's map entry (name -> Feature) of a column; nothing where null."""
  where = f"{where}, column '{name}'"
  array = _plain(array)
  present = None
  if array.null_count:
    if nulls == "refuse" or feature.shape:
      raise errors.DataError(
          f"{where}: {array.null_count} null value(s); with nulls=refuse (or "
          "in a fixed-size list) a null stops the conversion: fill them, or "
          f"convert with nulls=fill (a null becomes the spec's default)")
    present = array.is_valid().to_numpy(zero_copy_only=False)
  if feature.kind == spec.VAR_LEN or feature.shape:
    values = _lists(array, feature, where)
  else:
    values = _scalars(array, feature, where)
  key = name.encode()
  key_field = bytes([_FIELD_1]) + seg.varint(len(key)) + key
  entry = seg.message(_FIELD_1, seg.concat([
      seg.constant(key_field, len(array)),
      seg.message(_FIELD_2, seg.message(_FEATURE_TAG[feature.dtype], values))]))
  return entry if present is None else seg.keep(entry, present)


def encode(batch, features, nulls, where):
  """Each row of a pyarrow.RecordBatch as a serialized tf.train.Example.

  Raises:
    DataError: a refused null, a null inside a list, or an unsigned value
      beyond int64.
  """
  assert nulls in schema.NULLS, nulls
  entries = [_entry(name, batch.column(name), feature, nulls, where)
             for name, feature in features.items()]
  records = seg.message(_FIELD_1, seg.concat(entries))
  return seg.Segments([seg.join(records)], records.lengths)

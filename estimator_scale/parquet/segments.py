"""One byte string per row, for a batch of rows: pieces joined once."""
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_VARINT_BYTES = 10  # a negative int64 takes ten 7-bit groups
_BINARY = pa.large_binary()
_NOTHING = pa.scalar(b"", _BINARY)


class Segments:
  """Row i's bytes are row i of every piece (large_binary array or scalar)."""

  def __init__(self, pieces, lengths):
    self.pieces = pieces
    self.lengths = lengths


def array(data, lengths):
  """An Arrow array whose row i is the next `lengths[i]` bytes of `data`."""
  offsets = np.zeros(len(lengths) + 1, np.int64)
  np.cumsum(lengths, out=offsets[1:])
  return pa.Array.from_buffers(_BINARY, len(lengths), [
      None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data))])


def of(data, lengths):
  """Row i is the next `lengths[i]` bytes of the uint8 array `data`."""
  lengths = np.asarray(lengths, np.int64)
  return Segments([array(data, lengths)], lengths)


def fixed(matrix):
  """Row i is `matrix[i]` (a uint8 array of shape [rows, width])."""
  rows, width = matrix.shape
  return of(np.ascontiguousarray(matrix).reshape(-1),
            np.full(rows, width, np.int64))


def constant(value, rows):
  """Every row is the bytes `value`."""
  return Segments([pa.scalar(value, _BINARY)], np.full(rows, len(value),
                                                          np.int64))


def varints(values):
  """`values` (int64 or uint64) as protobuf varints; negative ones take ten."""
  values = np.asarray(values)
  if values.size and (values == values[0]).all():
    return constant(varint(int(values[0])), len(values))
  bits = values.astype(np.int64, copy=False).view(np.uint64)
  if not bits.size or bits.max() < 0x80:  # lengths, small ids: one byte each
    return of(bits.astype(np.uint8), np.ones(len(bits), np.int64))
  lengths = np.ones(len(bits), np.int64)
  for group in range(1, _VARINT_BYTES):
    lengths += bits >= np.uint64(1 << (7 * group))
  longest = int(lengths.max())
  groups = np.empty((len(bits), longest), np.uint8)
  for group in range(longest):
    low = (bits >> np.uint64(7 * group)) & np.uint64(0x7F)
    more = np.where(lengths > group + 1, 0x80, 0).astype(np.uint8)
    groups[:, group] = low.astype(np.uint8) | more
  return of(groups[np.arange(longest) < lengths[:, None]], lengths)


def varint(value):
  value &= (1 << 64) - 1
  out = bytearray()
  while True:
    low, value = value & 0x7F, value >> 7
    out.append(low | (0x80 if value else 0))
    if not value:
      return bytes(out)


def concat(parts):
  """Row i is row i of every part, in order (nothing is copied)."""
  return Segments([piece for part in parts for piece in part.pieces],
                  sum(part.lengths for part in parts))


def message(tag, part):
  """Each row as a length-delimited protobuf field: tag, length, bytes."""
  return concat([constant(bytes([tag]), len(part.lengths)),
                 varints(part.lengths), part])


def join(part):
  """`part` as one Arrow array: each row's pieces copied together."""
  if not any(isinstance(piece, pa.Array) for piece in part.pieces):
    value = b"".join(piece.as_py() for piece in part.pieces)
    return pa.array([value] * len(part.lengths), _BINARY)
  if len(part.pieces) == 1:
    return part.pieces[0]
  return pc.binary_join_element_wise(*part.pieces, _NOTHING)


def data(joined):
  """The bytes of every row of a joined array, back to back (a view)."""
  offsets = np.frombuffer(joined.buffers()[1], np.int64)
  first, last = offsets[joined.offset], offsets[joined.offset + len(joined)]
  return np.frombuffer(joined.buffers()[2], np.uint8, count=last - first,
                       offset=first) if last > first else np.zeros(0, np.uint8)


def group(items, offsets):
  """Row i is items offsets[i] .. offsets[i + 1] - 1 back to back."""
  ends = np.zeros(len(items.lengths) + 1, np.int64)
  np.cumsum(items.lengths, out=ends[1:])
  lengths = ends[offsets[1:]] - ends[offsets[:-1]]
  return of(data(join(items)), lengths)


def keep(part, rows):
  """The rows where the bool array `rows` is set; the others become empty."""
  if rows.all():
    return part
  lengths = np.where(rows, part.lengths, 0)
  kept = pc.if_else(pa.array(rows), join(part), _NOTHING)
  return Segments([kept], lengths)

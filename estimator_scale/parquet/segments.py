"""One byte string per row, for a whole batch of rows at once.

A tf.train.Example is nested length-prefixed messages; building one per row
in Python would make the conversion a loop over every value of the file.
Here each piece of every row (a key, a varint, a packed list) is one numpy
array for the batch, and putting pieces together is array arithmetic, so
Python runs a fixed number of steps per column and batch.
"""
import numpy as np

_VARINT_BYTES = 10  # a negative int64 takes ten 7-bit groups


class Segments:
  """Row i's bytes are `data[starts()[i]:starts()[i] + lengths[i]]`; rows
  lie back to back in `data`, in order."""

  def __init__(self, data, lengths):
    self.data = data
    self.lengths = lengths

  def starts(self):
    starts = np.zeros(len(self.lengths), np.int64)
    np.cumsum(self.lengths[:-1], out=starts[1:])
    return starts


def fixed(matrix):
  """Row i is `matrix[i]` (a uint8 array of shape [rows, width])."""
  rows, width = matrix.shape
  return Segments(np.ascontiguousarray(matrix).reshape(-1),
                  np.full(rows, width, np.int64))


def constant(value, rows):
  """Every row is the bytes `value`."""
  row = np.frombuffer(value, np.uint8)
  return fixed(np.broadcast_to(row, (rows, len(row))))


def varints(values):
  """Each of `values` (int64 or uint64) as a protobuf varint: 7 bits a byte,
  low first, the top bit set on all but the last; a negative int64 is read
  as its two's complement, so it takes ten bytes."""
  bits = np.asarray(values).astype(np.int64, copy=False).view(np.uint64)
  lengths = np.ones(len(bits), np.int64)
  for group in range(1, _VARINT_BYTES):
    lengths += bits >= np.uint64(1 << (7 * group))
  shifts = np.arange(_VARINT_BYTES, dtype=np.uint64) * np.uint64(7)
  groups = ((bits[:, None] >> shifts) & np.uint64(0x7F)).astype(np.uint8)
  position = np.arange(_VARINT_BYTES)
  groups |= np.where(position < lengths[:, None] - 1, 0x80, 0).astype(np.uint8)
  return Segments(groups[position < lengths[:, None]], lengths)


def concat(parts):
  """Row i is the concatenation of row i of every part, in order."""
  lengths = sum(part.lengths for part in parts)
  out = Segments(np.empty(int(lengths.sum()), np.uint8), lengths)
  cursor = out.starts()
  for part in parts:
    _scatter(out.data, cursor, part)
    cursor += part.lengths
  return out


def _scatter(out, cursor, part):
  """Copies row i of `part` to `out[cursor[i]:]`."""
  if not part.data.size:
    return
  shift = np.repeat(cursor - part.starts(), part.lengths)
  shift += np.arange(part.data.size)
  out[shift] = part.data


def group(items, offsets):
  """Row i is items offsets[i] .. offsets[i + 1] - 1 back to back (the
  elements of list i)."""
  ends = np.zeros(len(items.lengths) + 1, np.int64)
  np.cumsum(items.lengths, out=ends[1:])
  return Segments(items.data, ends[offsets[1:]] - ends[offsets[:-1]])


def keep(part, rows):
  """The rows where the bool array `rows` is set; the others become empty."""
  if rows.all():
    return part
  return Segments(part.data[np.repeat(rows, part.lengths)],
                  np.where(rows, part.lengths, 0))


def message(tag, part):
  """Each row as a length-delimited protobuf field: tag, length, bytes."""
  return concat([constant(bytes([tag]), len(part.lengths)),
                 varints(part.lengths), part])

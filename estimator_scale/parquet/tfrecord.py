"""TFRecord framing without TensorFlow: lengths and masked CRC-32C checksums.

The converter's worker processes never import TensorFlow: it would cost each
of them several hundred MB of resident memory, more than the row group it
holds, and seconds to start. TensorFlow's readers check every record's two
checksums, so they are computed here, over a whole batch of records at once
with numpy (one Python step per byte position, not per byte).
"""
import numpy as np

from estimator_scale.parquet import segments as segments_lib

_POLYNOMIAL = 0x82F63B78  # CRC-32C (Castagnoli), bit-reflected
_MASK_DELTA = 0xA282EAD8


def _table():
  table = np.arange(256, dtype=np.uint32)
  for _ in range(8):
    table = np.where(table & 1, (table >> 1) ^ np.uint32(_POLYNOMIAL),
                     table >> 1).astype(np.uint32)
  return table


_TABLE = _table()


def crc32c(records):
  """The CRC-32C of each row of `records`, a `Segments`, as uint32.

  Rows are visited longest first so that the rows still running at byte
  position j are a prefix of that order: each step is a slice, not a mask.
  """
  lengths = records.lengths
  count = len(lengths)
  crc = np.full(count, 0xFFFFFFFF, dtype=np.uint32)
  if not count:
    return crc
  order = np.argsort(-lengths, kind="stable")
  starts = records.starts()[order]
  sorted_lengths = lengths[order]
  # running[j]: how many rows are longer than j.
  longest = int(sorted_lengths[0])
  running = count - np.searchsorted(sorted_lengths[::-1],
                                    np.arange(longest), side="right")
  data = records.data
  state = crc.copy()
  for position in range(longest):
    alive = int(running[position])
    byte = data[starts[:alive] + position]
    head = state[:alive]
    state[:alive] = _TABLE[(head ^ byte) & 0xFF] ^ (head >> 8)
  crc[order] = state ^ np.uint32(0xFFFFFFFF)
  return crc


def masked_crc32c(records):
  """TFRecord's masked checksum of each row (rotated, plus a constant), so
  that a checksum stored inside checksummed data stays well distributed."""
  crc = crc32c(records).astype(np.uint64)
  rotated = ((crc >> 15) | (crc << 17)) & 0xFFFFFFFF
  return ((rotated + _MASK_DELTA) & 0xFFFFFFFF).astype("<u4")


def frame(records):
  """The bytes of a TFRecord file holding each row of `records` in order.

  Each record is its length (uint64), that length's masked CRC, the data
  and the data's masked CRC, all little-endian.
  """
  count = len(records.lengths)
  length_bytes = records.lengths.astype("<u8").view(np.uint8)
  lengths = segments_lib.fixed(length_bytes.reshape(count, 8))
  length_crc = masked_crc32c(lengths).view(np.uint8).reshape(count, 4)
  data_crc = masked_crc32c(records).view(np.uint8).reshape(count, 4)
  header = np.concatenate([length_bytes.reshape(count, 8), length_crc], axis=1)
  return segments_lib.concat([segments_lib.fixed(header), records,
                              segments_lib.fixed(data_crc)]).data

"""TFRecord framing without TensorFlow, with numpy over a batch of records."""
import numpy as np

from estimator_scale.parquet import segments as seg

_POLYNOMIAL = 0x82F63B78  # CRC-32C (Castagnoli), bit-reflected
_MASK_DELTA = 0xA282EAD8


def _table(bits):
  """The CRC state after `bits` zero bits, from each state below 2^bits."""
  table = np.arange(1 << bits, dtype=np.uint32)
  for _ in range(bits):
    table = np.where(table & 1, (table >> 1) ^ np.uint32(_POLYNOMIAL),
                     table >> 1).astype(np.uint32)
  return table


_BYTE = _table(8)
_PAIR = _table(16)  # 256 KiB: two bytes a step


def crc32c(data, lengths):
  """The uint32 CRC-32C of each string back to back in uint8 `data`."""
  count = len(lengths)
  crc = np.full(count, 0xFFFFFFFF, dtype=np.uint32)
  if not count or not lengths.max():
    return crc ^ np.uint32(0xFFFFFFFF)
  starts = np.zeros(count, np.int64)
  np.cumsum(lengths[:-1], out=starts[1:])
  order = np.argsort(-lengths, kind="stable")
  starts, lengths = starts[order], lengths[order]
  half = data.size // 2 + 1
  padded = np.zeros(2 * half + 1, np.uint8)
  padded[:data.size] = data
  words = np.concatenate([padded[:2 * half].view("<u2"),
                          padded[1:2 * half + 1].view("<u2")])
  first = np.where(starts % 2 == 0, starts // 2, half + starts // 2)
  pairs = lengths // 2
  # running[j]: how many strings have more than j pairs.
  running = count - np.searchsorted(pairs[::-1], np.arange(int(pairs[0])),
                                    side="right")
  state = crc.copy()
  for step, alive in enumerate(running.tolist()):
    head = state[:alive]
    pair = words[first[:alive] + step]
    state[:alive] = _PAIR[(head ^ pair) & 0xFFFF] ^ (head >> 16)
  odd = lengths % 2 == 1
  if odd.any():
    head = state[odd]
    last = data[starts[odd] + lengths[odd] - 1]
    state[odd] = _BYTE[(head ^ last) & 0xFF] ^ (head >> 8)
  crc[order] = state ^ np.uint32(0xFFFFFFFF)
  return crc


def _masked(crc):
  """TFRecord's masked checksum (rotated, plus a constant)."""
  crc = crc.astype(np.uint64)
  rotated = ((crc >> 15) | (crc << 17)) & 0xFFFFFFFF
  return ((rotated + _MASK_DELTA) & 0xFFFFFFFF).astype("<u4")


def frame(records):
  """The uint8 bytes of a TFRecord file of the joined `records`."""
  count = len(records.lengths)
  length_bytes = records.lengths.astype("<u8").view(np.uint8)
  length_crc = _masked(crc32c(length_bytes, np.full(count, 8, np.int64)))
  data_crc = _masked(crc32c(seg.data(records.pieces[0]), records.lengths))
  header = np.concatenate([length_bytes.reshape(count, 8),
                           length_crc.view(np.uint8).reshape(count, 4)], axis=1)
  framed = seg.concat([seg.fixed(header), records,
                       seg.fixed(data_crc.view(np.uint8).reshape(count, 4))])
  return seg.data(seg.join(framed))

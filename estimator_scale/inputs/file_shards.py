"""File-level sharding that resumes exactly, also on another worker count."""
import dataclasses
import itertools
import json
import os

from absl import logging
import numpy as np
import tensorflow as tf

from estimator_scale import errors

COUNTS_FILES = "input_files-*.json"
"""Record counts of the input files, beside the checkpoints in model_dir."""

_WHOLE_FILE = 1 << 62  # a window when shuffling permutes whole files


@dataclasses.dataclass(frozen=True)
class Piece:
  """Records [start, stop) of file `file` in `epoch`'s order (-1: its end)."""
  epoch: int
  file: int
  start: int
  stop: int

  @property
  def size(self):
    return self.stop - self.start


@dataclasses.dataclass(frozen=True)
class Lane:
  """What one worker reads: `leftovers`, then `files` whole in each epoch
  from `first_epoch` on."""
  leftovers: tuple
  files: tuple
  first_epoch: int


def _epoch_pieces(lane, epoch, counts, seed):
  order = list(lane.files)
  if seed is not None:
    order = np.random.default_rng([seed % (1 << 64), epoch]).permutation(
        order).tolist()
  return [Piece(epoch, f, 0, counts(f)) for f in order]


def remaining(lane, consumed, counts, seed):
  """The `Piece`s of `lane` after its first `consumed` records, forever
  (`counts`: file -> records; `seed` None: no shuffle)."""
  leftovers = list(lane.leftovers)
  while consumed and leftovers and consumed >= leftovers[0].size:
    consumed -= leftovers.pop(0).size
  epoch = lane.first_epoch
  if consumed and not leftovers:
    per_epoch = sum(counts(f) for f in lane.files)
    if not per_epoch:
      raise errors.DataError(
          f"files {list(lane.files)[:5]} of the input hold no records: a "
          "worker's share of the files must not be empty")
    epoch += consumed // per_epoch
    consumed %= per_epoch
  pieces = itertools.chain(leftovers, itertools.chain.from_iterable(
      _epoch_pieces(lane, e, counts, seed) for e in itertools.count(epoch)))
  for piece in pieces:
    if consumed and consumed >= piece.size:
      consumed -= piece.size
      continue
    yield dataclasses.replace(piece, start=piece.start + consumed)
    consumed = 0


def advance(lane, consumed, counts, seed):
  """`lane` after its first `consumed` records, as a lane of its own."""
  if not consumed:
    return lane
  rest = remaining(lane, consumed, counts, seed)
  first = next(rest)
  last = max(first.epoch, lane.first_epoch - 1)
  pieces = [first] + list(itertools.takewhile(lambda p: p.epoch <= last,
                                              rest))
  return Lane(tuple(pieces), lane.files, last + 1)


def deal(pieces, workers):
  """`pieces` dealt in order over `workers` lanes equal in records to one;
  one list of pieces per worker."""
  total = sum(p.size for p in pieces)
  parts = [[] for _ in range(workers)]
  done, lane = 0, 0
  for piece in pieces:
    while piece.size > 0:
      room = total * (lane + 1) // workers - done
      if room <= 0:
        lane += 1
        continue
      take = min(room, piece.size)
      parts[lane].append(dataclasses.replace(piece,
                                             stop=piece.start + take))
      piece = dataclasses.replace(piece, start=piece.start + take)
      done += take
  return parts


def _handover(lanes, consumed, workers, num_files, counts, seed, last_epoch):
  """The lanes after a change to `workers`, and the last epoch dealt."""
  rests = [remaining(lane, consumed, counts, seed) for lane in lanes]
  firsts = [next(rest) for rest in rests]
  last_epoch = max([last_epoch] + [p.epoch for p in firsts])
  unread = []
  for first, rest in zip(firsts, rests):
    unread += itertools.takewhile(lambda p: p.epoch <= last_epoch,
                                  itertools.chain([first], rest))
  unread.sort(key=lambda p: p.epoch)
  parts = deal(unread, workers)
  return [Lane(tuple(parts[w]), tuple(range(w, num_files, workers)),
               last_epoch + 1) for w in range(workers)], last_epoch


def plan(segments, num_files, counts, seed):
  """(lanes, consumed): one Lane per worker of the last of `segments`
  ([(workers, records each consumed)], oldest first), and its records read."""
  workers, consumed = segments[0]
  lanes = [Lane((), tuple(range(w, num_files, workers)), 0)
           for w in range(workers)]
  last_epoch = -1
  for workers, next_consumed in segments[1:]:
    lanes, last_epoch = _handover(lanes, consumed, workers, num_files, counts,
                                  seed, last_epoch)
    consumed = next_consumed
  return lanes, consumed


def segments(entries, examples, workers):
  """`plan`'s segments from `input_position.json` entries and trained
  `examples`; a change of global batch alone does not split a segment."""
  marks = [(e["examples"], e["workers"]) for e in entries]
  marks.append((examples, workers))
  result = [[marks[0][1], 0]]
  for (start, count), (end, _) in zip(marks, marks[1:]):
    if count != result[-1][0]:
      result.append([count, 0])
    result[-1][1] += (end - start) // count
  if workers != result[-1][0]:
    result.append([workers, 0])
  return [tuple(s) for s in result]


class Counts:
  """file number -> record count, kept in model_dir (`freeze`: unknown = -1)."""

  def __init__(self, files, model_dir, worker, skip_corrupt=False):
    self._files = list(files)
    self._model_dir = model_dir
    self._worker = worker
    self._skip_corrupt = skip_corrupt
    self._known = _read_counts(model_dir)
    self._counted = {}
    self._new = False
    self._frozen = False

  def __call__(self, number):
    path = self._files[number]
    if path not in self._counted:
      self.count([number])
    return self._counted.get(path, -1)

  def count(self, numbers):
    """Counts of files `numbers`, counting those not kept unless frozen."""
    missing = []
    for number in numbers:
      path = self._files[number]
      if path in self._counted:
        continue
      size = tf.io.gfile.stat(path).length
      known = self._known.get(path)
      if known is not None and known[0] == size:
        self._counted[path] = known[1]
      else:
        missing.append((path, size))
    if missing and not self._frozen:
      paths = [path for path, _ in missing]
      for (path, size), count in zip(
          missing, _count_records(paths, self._skip_corrupt)):
        self._known[path] = [size, count]
        self._counted[path] = count
      self._new = True

  def freeze(self):
    """Writes the counts made, and stops counting."""
    self._frozen = True
    if self._new and self._model_dir:
      path = os.path.join(self._model_dir,
                          COUNTS_FILES.replace("*", str(self._worker)))
      tf.io.gfile.makedirs(self._model_dir)
      with tf.io.gfile.GFile(path + ".tmp", "w") as f:
        json.dump(self._known, f)
      tf.io.gfile.rename(path + ".tmp", path, overwrite=True)


def _read_counts(model_dir):
  known = {}
  if not model_dir:
    return known
  for path in sorted(tf.io.gfile.glob(os.path.join(model_dir, COUNTS_FILES))):
    with tf.io.gfile.GFile(path) as f:
      try:
        known.update(json.load(f))
      except ValueError as e:
        raise errors.DataError(
            f"{path} is not the JSON the framework writes ({e}); delete it "
            "to count the input's records again") from e
  return known


def _count_records(paths, skip_corrupt):
  """Records of each TFRecord file, counted in parallel in a graph apart."""

  def count(path):
    records = tf.data.TFRecordDataset(path)
    if skip_corrupt:
      records = records.ignore_errors()
    return records.reduce(np.int64(0), lambda n, _: n + 1)

  with tf.Graph().as_default():
    counts = tf.data.Dataset.from_tensor_slices(list(paths)).map(
        count, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).batch(
            len(paths))
    batch = tf.compat.v1.data.make_one_shot_iterator(counts).get_next()
    with tf.compat.v1.Session() as session:
      return [int(n) for n in session.run(batch)]


def lane_records(files, lane, counts, read, seed, window):
  """A Dataset of `lane`'s records from its start, forever (`read`: path ->
  Dataset; `window`: records per shuffle window)."""
  window = window or _WHOLE_FILE
  names = tf.constant(list(files))
  rows = tf.data.Dataset.from_generator(
      lambda: ((p.epoch, p.file, p.start, p.stop)
               for p in remaining(lane, 0, counts, seed)),
      output_signature=tf.TensorSpec([4], tf.int64))

  def records(name, piece):
    # Indexed, not unstacked: an unstacked part left unused crashes
    # TensorFlow 2.15 when the iterator is made.
    epoch, number, start, stop = piece[0], piece[1], piece[2], piece[3]
    whole = tf.constant(-1, tf.int64)
    if seed is None:
      return read(name).skip(start).take(
          tf.where(stop < 0, whole, stop - start))
    first = start // window
    last = (stop + window - 1) // window
    data = read(name).skip(first * window).take(
        tf.where(stop < 0, whole, (last - first) * window))
    key = tf.random.experimental.stateless_fold_in(
        tf.stack([tf.constant(seed, tf.int64), epoch]), number)

    def permute(index, block):
      order = tf.random.experimental.stateless_shuffle(
          tf.range(tf.shape(block, out_type=tf.int64)[0]),
          seed=tf.random.experimental.stateless_fold_in(key, index))
      return tf.gather(block, order)

    return data.batch(window).enumerate(first).map(permute).unbatch().skip(
        start - first * window).take(tf.where(stop < 0, whole, stop - start))

  return rows.map(lambda piece: (tf.gather(names, piece[1]), piece)).flat_map(
      records)


def by_file(num_files, workers):
  """Whether `workers` read by file: several files, none without one."""
  return num_files >= max(workers, 2)


def worker_records(source, position, entries, model_dir, workers, index):
  """This worker's records of `source` from the checkpoint's position on."""
  files, seed = source.files, source.seed
  entries = [e for e in entries if e["step"] <= position.step]
  stretch = entries
  for n, entry in enumerate(entries):
    if not by_file(len(files), entry["workers"]):
      stretch = entries[n + 1:]
  if len(stretch) < len(entries) and position.examples:
    logging.warning("input: the job read its %d files by record before; "
                    "each worker starts its share of the files over",
                    len(files))
  if stretch:
    job = segments(stretch, position.examples, workers)
  else:
    job = [(workers, position.examples // workers)]
  counts = Counts(files, model_dir, index, source.skip_corrupt)
  if position.examples:
    # What the plan will walk: every file once the job has changed size.
    counts.count(range(len(files)) if len(job) > 1 else
                 range(index, len(files), workers))
  lanes, consumed = plan(job, len(files), counts, seed)
  lane = advance(lanes[index], consumed, counts, seed)
  counts.freeze()
  return lane_records(files, lane, counts, source.read, seed, source.window)

"""File-level sharding that resumes exactly, also on another worker count.

Each worker reads only its own files, one file after another. A file's
shuffled order for an epoch is its windows of `shuffle_buffer` records (from
the file's start) in turn, each permuted with (seed, epoch, file, window);
a worker's input is a lane of pieces `(epoch, file, start, stop)`, each the
records [start, stop) of one file's shuffled order. A lane starts with the
pieces it was handed at the last change of worker count, then reads its own
files (every W-th of the list) whole, epoch after epoch, in an order
permuted with (seed, epoch).

Every worker consumes global batch / W records per update, so how far a lane
has read is a function of the step, and the lanes of a run are a pure
function of (the files with their record counts, seed, the worker counts in
`input_position.json` and the steps they changed at). At a change from W to
W' workers, every old lane's unread pieces of the epochs any lane has begun
(the rest of its current file, then its unread files) are dealt over the W'
new lanes in order, cut where a lane's share ends, so each new lane gets the
same number of records to one; the new lanes then read their own files from
the next epoch on. A second change deals the rest of those pieces again.
So every record of an epoch is trained once, whatever the changes. What is
read and not trained: for a piece that starts inside a file (at most one
per old worker plus one per new worker at a change, and one per worker at a
restart), the file up to the piece's window and the part of the windows at
either end outside the piece.

Record counts are needed only to resume (a run from the start reads its
files to their end); counting reads a file once, so the counts are kept in
`input_files-<worker>.json` files in model_dir, each worker writing what it
counted, keyed by path and checked against the file's size in bytes.
"""
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
  """Records [start, stop) of file number `file` in `epoch`'s shuffled order.

  A file's shuffled order is its windows in turn, each permuted with (seed,
  epoch, file, window); `stop` is -1 where the file's count is unknown (a
  piece read to the file's end).
  """
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
  """The pieces of `lane` after its first `consumed` records, forever.

  Args:
    lane: a `Lane`.
    consumed: records the lane has trained.
    counts: file number -> its record count.
    seed: the shuffle seed, or None.

  Yields:
    `Piece`s, the first without the part already trained.
  """
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
  """`lane` after its first `consumed` records, as a lane of its own.

  What the walk counts is counted now, so the lane's later pieces need no
  count (a piece whose file was not counted is read to its end).
  """
  if not consumed:
    return lane
  rest = remaining(lane, consumed, counts, seed)
  first = next(rest)
  last = max(first.epoch, lane.first_epoch - 1)
  pieces = [first] + list(itertools.takewhile(lambda p: p.epoch <= last,
                                              rest))
  return Lane(tuple(pieces), lane.files, last + 1)


def deal(pieces, workers):
  """`pieces` dealt in order over `workers` lanes, equal in records to one.

  A piece is cut where a lane's share ends inside it.

  Returns:
    One list of pieces per worker.
  """
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
  """The lanes of the current run, and the records each has consumed.

  Args:
    segments: [(workers, records each worker consumed)], one per stretch of
      the job with one worker count, oldest first; the last is the stretch
      the current run continues.
    num_files: the files of the input.
    counts: file number -> its record count.
    seed: the shuffle seed, or None.

  Returns:
    (lanes, consumed): one `Lane` per worker of the last segment.
  """
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
  """`plan`'s segments from `input_position.json`'s entries.

  Args:
    entries: the history up to the checkpoint's step, oldest first, of the
      stretch read by file (no worker count above the file count).
    examples: examples the job has trained at the checkpoint.
    workers: this run's worker count.

  Returns:
    [(workers, records each worker consumed)], a change of global batch
    alone not splitting a segment.
  """
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
  """file number -> record count, kept in model_dir's count files.

  Counting reads the file; `freeze` makes unknown counts -1 instead (a piece
  read to its end), once the plan has what it needs.
  """

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
    """Looks up the counts of files `numbers`, counting those not kept (all
    at once) unless frozen."""
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
  """Records of each TFRecord file, counted now, files in parallel, whatever
  graph is being built (a graph and session of their own)."""

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
  """A Dataset of the records of `lane`, forever.

  Args:
    files: the paths, indexed by `Piece.file`.
    lane: a `Lane` read from its start (`advance`).
    counts: file number -> its record count, or -1 (`Counts.freeze`).
    read: a path (string tensor) -> a Dataset of its records.
    seed: the shuffle seed, or None.
    window: records per shuffled window, or None (whole files).
  """
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


def worker_records(files, read, position, entries, model_dir, workers, index,
                   seed, window, skip_corrupt=False):
  """This worker's records from the checkpoint's position on, forever.

  Args:
    files: the paths, in order.
    read: a path (string tensor) -> a Dataset of its records.
    position: the run's `position.Position`.
    entries: `position.read_history`'s entries.
    model_dir: where the record counts are kept, or None.
    workers: this run's worker count.
    index: this worker's index.
    seed: the shuffle seed, or None.
    window: records per shuffled window, or None (whole files).
    skip_corrupt: count only the readable records.
  """
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
  counts = Counts(files, model_dir, index, skip_corrupt)
  if position.examples:
    # What the plan will walk: every file once the job has changed size.
    counts.count(range(len(files)) if len(job) > 1 else
                 range(index, len(files), workers))
  lanes, consumed = plan(job, len(files), counts, seed)
  lane = advance(lanes[index], consumed, counts, seed)
  counts.freeze()
  return lane_records(files, lane, counts, read, seed, window)

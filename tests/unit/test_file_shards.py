"""File-level sharding: each record once per epoch across changes of size."""
import collections
import glob
import itertools
import os
import random

from absl import logging
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale.inputs import file_shards
from estimator_scale import topology as topology_lib
from tests.helpers import trained_ids
from tests.workers.tiny_models import generated_data

_BATCH = 6  # global batch: divides over 1, 2 and 3 workers


def _lane_records(lane, counts, seed):
  """The (epoch, file, position) a lane reads, in order, forever."""
  for piece in file_shards.remaining(lane, 0, counts.__getitem__, seed):
    for position in range(piece.start, piece.stop):
      yield piece.epoch, piece.file, position


def _job(counts, runs, seed=3):
  """Trains `runs` [(workers, updates)] one after another, each a restart.

  Returns:
    (the records trained, update after update, each update's in worker
    order; the pieces of each run's lanes, at its start).
  """
  entries, examples, trained, starts = [], 0, [], []
  for workers, updates in runs:
    job = file_shards.segments(entries, examples, workers)
    lanes, consumed = file_shards.plan(job, len(counts), counts.__getitem__,
                                       seed)
    lanes = [file_shards.advance(lane, consumed, counts.__getitem__, seed)
             for lane in lanes]
    starts.append(lanes)
    if not entries or entries[-1]["workers"] != workers:
      entries.append({"step": examples // _BATCH, "examples": examples,
                      "global_batch": _BATCH, "workers": workers})
    readers = [_lane_records(lane, counts, seed) for lane in lanes]
    for _ in range(updates):
      for reader in readers:
        trained += itertools.islice(reader, _BATCH // workers)
    examples += updates * _BATCH
  return trained, starts


def _epoch(counts, epoch):
  return sorted((epoch, f, p) for f, count in enumerate(counts)
                for p in range(count))


def test_each_record_once_per_epoch_across_2_3_1_workers():
  counts = [8] * 12  # 96 records: 16 updates an epoch
  runs = [(2, 5), (3, 4), (3, 2), (1, 5), (2, 3), (3, 7), (1, 6)]
  trained, starts = _job(counts, runs)
  assert sorted(trained[:96]) == _epoch(counts, 0)
  assert sorted(trained[96:192]) == _epoch(counts, 1)
  # The same job without restarts reads the same records in the same order.
  assert trained[:96] == _job(counts, [(2, 5), (3, 6), (1, 5)])[0][:96]
  # What a change re-reads: pieces that start inside a file, at most one
  # per old worker and one per new worker.
  for (old, _), (new, _), lanes in zip(runs, runs[1:], starts[1:]):
    inside = [p for lane in lanes for p in lane.leftovers if p.start > 0]
    assert len(inside) <= old + new


def test_files_of_unequal_counts_are_each_read_once_per_epoch():
  counts = [5, 23, 9, 0, 14, 7, 11]
  runs = [(2, 4), (3, 9), (1, 2), (3, 11), (2, 5), (1, 30)]
  trained, _ = _job(counts, runs)
  per_record = collections.Counter(trained)
  assert max(per_record.values()) == 1
  # Each worker's epoch is its own files: every epoch but the last two is
  # complete.
  last = max(epoch for epoch, _, _ in trained)
  for epoch in range(last - 1):
    assert sorted(r for r in trained if r[0] == epoch) == _epoch(counts,
                                                                 epoch)


def test_random_jobs_train_each_record_at_most_once_and_lose_none():
  rng = random.Random(2)
  for _ in range(60):
    counts = [rng.randint(0, 15) for _ in range(rng.randint(3, 9))]
    runs = [(rng.choice([1, 2, 3]), rng.randint(0, 12))
            for _ in range(rng.randint(1, 6))]
    if any(sum(counts[w::n]) == 0 for n, _ in runs for w in range(n)):
      continue  # a worker whose files are all empty has nothing to train
    trained, _ = _job(counts, runs)
    _, starts = _job(counts, runs + [(runs[-1][0], 0)])
    last = max([epoch for epoch, _, _ in trained], default=0)
    unread = [(p.epoch, p.file, q) for lane in starts[-1]
              for p in itertools.takewhile(
                  lambda p: p.epoch <= last,
                  file_shards.remaining(lane, 0, counts.__getitem__, 3))
              for q in range(p.start, p.stop)]
    # What was trained and what the lanes have still to read are every
    # record of those epochs, each once.
    assert sorted(trained + unread) == [
        r for epoch in range(last + 1) for r in _epoch(counts, epoch)], runs


def test_a_change_deals_the_rest_equally_in_order():
  pieces = [file_shards.Piece(0, 1, 3, 10), file_shards.Piece(0, 4, 0, 8),
            file_shards.Piece(1, 0, 0, 5)]
  parts = file_shards.deal(pieces, 3)
  assert [sum(p.size for p in part) for part in parts] == [6, 7, 7]
  assert parts[0] == [file_shards.Piece(0, 1, 3, 9)]
  assert parts[1] == [file_shards.Piece(0, 1, 9, 10),
                      file_shards.Piece(0, 4, 0, 6)]


def test_segments_merge_a_change_of_global_batch_alone():
  entries = [{"step": 0, "examples": 0, "global_batch": 8, "workers": 2},
             {"step": 10, "examples": 80, "global_batch": 16, "workers": 2},
             {"step": 20, "examples": 240, "global_batch": 12, "workers": 3}]
  assert file_shards.segments(entries, 300, 3) == [(2, 120), (3, 20)]
  assert file_shards.segments(entries, 300, 1) == [(2, 120), (3, 20),
                                                   (1, 0)]


def _write(tmp_path, counts):
  paths = []
  for f, count in enumerate(counts):
    path = str(tmp_path / f"part-{f}.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
      for i in range(count):
        writer.write(f"{f}:{i}".encode())
    paths.append(path)
  return paths


@pytest.mark.parametrize("seed,window", [(4, 3), (4, None), (None, 3)])
def test_a_piece_reads_its_part_of_the_files_shuffled_order(tmp_path, seed,
                                                            window):
  paths = _write(tmp_path, [10, 7])
  counts = file_shards.Counts(paths, str(tmp_path), 0)

  def read(*pieces, size=None):
    lane = file_shards.Lane(tuple(pieces), (1,), 0)
    records = file_shards.lane_records(paths, lane, counts,
                                       tf.data.TFRecordDataset, seed, window)
    size = size or sum(p.size for p in pieces)
    return [r.decode() for r in records.take(size).as_numpy_iterator()]

  whole = read(file_shards.Piece(2, 0, 0, 10))
  assert sorted(whole) == sorted(f"0:{i}" for i in range(10))
  assert (whole == [f"0:{i}" for i in range(10)]) == (seed is None)
  assert read(file_shards.Piece(2, 0, 4, 8), file_shards.Piece(
      2, 0, 1, 2)) == whole[4:8] + whole[1:2]
  # Another epoch, another order; a piece of an unknown count reads to the
  # file's end.
  if seed is not None:
    assert read(file_shards.Piece(3, 0, 0, 10)) != whole
  assert read(file_shards.Piece(2, 0, 5, -1), size=5) == whole[5:]


def test_counts_are_kept_in_model_dir_and_recounted_when_a_file_changes(
    tmp_path):
  paths = _write(tmp_path, [3, 5])
  counts = file_shards.Counts(paths, str(tmp_path / "model"), 1)
  assert (counts(0), counts(1)) == (3, 5)
  counts.freeze()
  _write(tmp_path, [4])  # part-0 rewritten
  again = file_shards.Counts(paths, str(tmp_path / "model"), 0)
  again.freeze()
  assert (again(0), again(1)) == (-1, 5)  # frozen: not counted again
  assert file_shards.Counts(paths, str(tmp_path / "model"), 0)(0) == 4


def _id_files(tmp_path):
  """12 TFRecord files of 8 examples each (ids 0-95), and their spec."""
  model, features, labels = generated_data("mlp", 96)
  es.inputs.write_tfrecord_shards(features, labels, str(tmp_path / "data"),
                                  12)
  spec = {"x": tf.io.FixedLenFeature([5], tf.float32),
          "id": tf.io.FixedLenFeature([], tf.int64),
          "label": tf.io.FixedLenFeature([], tf.int64)}
  return model, str(tmp_path / "data" / "*.tfrecord"), spec


def _checkpoint(model_dir, step):
  """A checkpoint of nothing but `global_step`, which is what the input
  position reads."""
  with tf.Graph().as_default():
    global_step = tf.compat.v1.train.get_or_create_global_step()
    with tf.compat.v1.Session() as session:
      session.run(global_step.assign(step))
      tf.compat.v1.train.Saver().save(
          session, os.path.join(model_dir, "model.ckpt"), global_step=step)


def test_workers_reading_by_file_train_each_id_once_across_2_3_1(tmp_path):
  _, pattern, spec = _id_files(tmp_path)
  model_dir = str(tmp_path / "model")
  trained, step = [], 0
  for workers, updates in ((2, 5), (3, 4), (3, 3), (1, 4), (2, 4)):
    shares = []
    for index in range(workers):  # the chief first: it writes the history
      topology = topology_lib.Topology(num_workers=workers,
                                       worker_index=index,
                                       is_chief=index == 0)
      input_fn = es.inputs.from_tfrecords(pattern, spec, "label", _BATCH,
                                          topology=topology, seed=5,
                                          shuffle_buffer=3)
      with tf.Graph().as_default():
        dataset = input_fn(config=tf.estimator.RunConfig(model_dir))
        features, _ = tf.compat.v1.data.make_one_shot_iterator(
            dataset).get_next()
        with tf.compat.v1.Session() as session:
          shares.append([session.run(features["id"]).tolist()
                         for _ in range(updates)])
    trained += [i for update in zip(*shares) for share in update
                for i in share]
    step += updates
    _checkpoint(model_dir, step)
  assert sorted(trained[:96]) == list(range(96))
  assert len(set(trained[96:])) == len(trained[96:])
  assert glob.glob(os.path.join(model_dir, file_shards.COUNTS_FILES))


def test_an_estimator_restarted_twice_trains_each_file_record_once(tmp_path):
  model, pattern, spec = _id_files(tmp_path)
  seen = []
  for stop in (5, 9, 16):  # 96 examples / 6 = 16 updates an epoch
    estimator = es.make_estimator(model, model_dir=str(tmp_path / "model"),
                                  save_checkpoints_steps=1000, random_seed=0)
    hook = trained_ids.IdsHook()
    estimator.train(es.inputs.from_tfrecords(pattern, spec, "label", _BATCH,
                                             seed=7, shuffle_buffer=4),
                    hooks=[hook], max_steps=stop)
    seen += hook.seen
  assert sorted(seen) == list(range(96))


def test_a_change_between_record_and_file_sharding_says_it_starts_over(
    tmp_path):
  _write(tmp_path, [4, 4, 4])
  model_dir = str(tmp_path / "model")
  spec = {"id": tf.io.FixedLenFeature([], tf.string)}
  lines = []

  def build(workers, step):
    _checkpoint(model_dir, step)
    topology = topology_lib.Topology(num_workers=workers)
    input_fn = es.inputs.from_tfrecords(str(tmp_path / "*.tfrecord"),
                                        spec, None, 4, topology=topology)
    with tf.Graph().as_default():
      input_fn(config=tf.estimator.RunConfig(model_dir))

  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(logging, "warning", lambda msg, *a: lines.append(msg % a))
    build(4, 1)  # 4 workers, 3 files: by record
    build(2, 2)  # by file: says so
    build(4, 3)  # by record again: says so
  assert lines == [
      "input: the job read its 3 files by record before; each worker starts "
      "its share of the files over",
      "from_tfrecords: 4 workers read 3 files by record, and the job read "
      "them by file before: the records start over in another order"]

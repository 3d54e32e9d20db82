"""The input position: a resumed job trains each example of the epoch once."""
import json
import os

from absl import logging
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale.inputs import position as input_position
from tests.helpers import trained_ids
from tests.workers.tiny_models import generated_data


def _take(dataset, count):
  return [int(x) for x in dataset.take(count).as_numpy_iterator()]


def test_position_counts_each_runs_batch_and_drops_rolled_back_entries():
  entries = [{"step": 0, "examples": 0, "global_batch": 8, "workers": 2},
             {"step": 10, "examples": 80, "global_batch": 12, "workers": 3},
             {"step": 30, "examples": 320, "global_batch": 4, "workers": 1}]
  assert input_position.position_at(entries, 20, 12).examples == 200
  assert input_position.position_at([], 5, 16).examples == 80


@pytest.mark.parametrize("seed,window", [(3, 6), (3, None), (None, None)])
def test_a_stream_from_a_position_is_the_rest_of_the_stream(seed, window):
  def epoch_rows(epoch):
    del epoch
    return tf.data.Dataset.range(20)

  whole = _take(input_position.stream(epoch_rows, lambda: 20, 0, seed,
                                      window), 70)
  for position in (7, 13, 20, 47):
    rest = input_position.stream(epoch_rows, lambda: 20, position, seed, window)
    assert _take(rest, 70 - position) == whole[position:]
  for epoch in range(3):
    assert sorted(whole[epoch * 20:(epoch + 1) * 20]) == list(range(20))
  if seed is not None:
    assert whole[:20] != whole[20:40]  # each epoch its own order


def test_file_records_resume_after_counting_them(tmp_path):
  paths = []
  for f in range(3):
    path = tmp_path / f"part{f}.csv"
    path.write_text("id\n" + "".join(f"{f * 10 + i}\n" for i in range(7)))
    paths.append(str(path))
  epoch_lines = input_position.file_records(
      paths, lambda p: tf.data.TextLineDataset(p).skip(1), seed=5)

  def rows(position):
    lines = input_position.stream(
        epoch_lines, lambda: input_position.count(epoch_lines(0)), position,
        5, 4)
    return _take(lines.map(tf.strings.to_number), 50 - position)

  whole = rows(0)
  assert sorted(whole[:21]) == sorted(f * 10 + i for f in range(3)
                                      for i in range(7))
  assert rows(30) == whole[30:]


def test_workers_share_each_global_batch():
  stream = tf.data.Dataset.range(24)
  shares = [_take(input_position.worker_share(stream, 6, 3, w), 8)
            for w in range(3)]
  assert shares[1] == [2, 3, 8, 9, 14, 15, 20, 21]
  assert sorted(sum(shares, [])) == list(range(24))


def _train(model_dir, max_steps, global_batch_size=8, shuffle_buffer=0):
  model, features, labels = generated_data("mlp", 96)
  estimator = es.make_estimator(model, model_dir=str(model_dir),
                                save_checkpoints_steps=1000, random_seed=0)
  hook = trained_ids.IdsHook()
  estimator.train(es.inputs.from_arrays(features, labels, global_batch_size,
                                        seed=7, shuffle_buffer=shuffle_buffer),
                  hooks=[hook], max_steps=max_steps)
  return hook.seen


def test_two_restarts_within_an_epoch_train_each_example_once(tmp_path):
  seen = []
  for stop in (5, 9, 12):  # 96 examples / 8 = 12 updates an epoch
    seen += _train(tmp_path, stop)
  assert sorted(seen) == list(range(96))
  # The next epoch, resumed mid-way too, is another permutation.
  later = _train(tmp_path, 17) + _train(tmp_path, 24)
  assert sorted(later) == list(range(96)) and later != seen
  with open(os.path.join(tmp_path, input_position.HISTORY_FILE)) as f:
    assert json.load(f) == [{"step": 0, "examples": 0, "global_batch": 8,
                             "workers": 1}]


def test_a_changed_global_batch_resumes_at_the_examples_consumed(tmp_path):
  seen = _train(tmp_path, 4, shuffle_buffer=20)  # 32 examples
  seen += _train(tmp_path, 8, global_batch_size=16, shuffle_buffer=20)
  assert sorted(seen) == list(range(96))


def test_an_own_input_fn_is_told_its_position_is_not_saved(tmp_path):
  model, features, labels = generated_data("mlp", 16)
  estimator = es.make_estimator(model, model_dir=str(tmp_path),
                                random_seed=0)

  def own_input_fn():
    return tf.data.Dataset.from_tensor_slices((features, labels)).batch(
        4).repeat()

  with pytest.MonkeyPatch.context() as patch:
    lines = []
    patch.setattr(logging, "warning", lambda msg, *a: lines.append(msg % a))
    estimator.train(own_input_fn, max_steps=1)
  assert [l for l in lines if "position is not saved" in l] == [
      "input: own_input_fn is not built by estimator_scale.inputs, so its "
      "position is not saved: a restart starts its data over"]


def _records(start, size, began, steps):
  """trained_ids records of one session: {step: ids of the global batch}."""
  return [{"start": start, "size": size, "began": began, "step": step,
           "worker": w, "ids": ids[w * len(ids) // size:
                                   (w + 1) * len(ids) // size]}
          for step, ids in steps.items() for w in range(size)]


def test_the_count_of_a_killed_job_allows_only_the_lost_updates_again():
  epoch, then = [5, 0, 9, 3, 11, 7, 1, 10, 2, 8, 4, 6], [4, 1, 0, 7]
  # 2 workers to step 3, a kill, a restart on 1 worker from step 2's commit.
  killed = _records(0, 2, 1.0, {1: epoch[0:4], 2: epoch[4:8], 3: epoch[8:]})
  good = killed + _records(2, 1, 9.0, {3: epoch[8:], 4: then})
  assert trained_ids.check_each_once(good, 12) == [(0, 2, 2, epoch[8:])]
  over = killed + _records(2, 1, 9.0, {3: epoch[0:4], 4: epoch[4:8]})
  with pytest.raises(AssertionError):
    trained_ids.check_each_once(over, 12)  # started the epoch over

"""The input wait: measured in a real Estimator's updates, and said on the
progress and straggler lines."""
import logging
import time

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import dataset_options_pb2

import estimator_scale as es
from estimator_scale import hooks as hooks_lib
from estimator_scale import input_wait
from estimator_scale import stragglers
from estimator_scale import topology as topology_lib
from tests.workers import tiny_models

_BATCH = 8
_PARSE_SECONDS = 0.1
"""The slow parse's sleep per batch: many times the model's update."""


class _Computing(es.ClassifierModel):
  """A linear classifier whose forward pass takes `seconds`: a normal
  job's update is its compute, long against the scheduling noise of a host
  that other tests share."""

  name = "input_wait_computing"

  def __init__(self, seconds):
    super().__init__()
    self._seconds = seconds

  def logits(self, features, training, params):
    """See base class."""
    x = tf.numpy_function(
        lambda v: time.sleep(self._seconds) or v, [features["x"]],
        tf.float32)
    x.set_shape(features["x"].shape)
    return tf.keras.layers.Dense(3)(x)

  def serving_features(self):
    """See base class."""
    return {"x": tf.TensorSpec([5], tf.float32)}


def _input_fn(features, labels, slow):
  """An input_fn of `features`, whose parse sleeps per batch where `slow`.

  The sleep comes after the prefetch, as a parse that cannot keep up would
  stand in the way of every batch; the normal pipeline prefetches.
  """

  def parse(batch, label):
    pause = tf.py_function(lambda: time.sleep(_PARSE_SECONDS) or 0.0, [],
                           tf.float32)
    with tf.control_dependencies([pause]):
      return tf.nest.map_structure(tf.identity, (batch, label))

  def input_fn():
    data = tf.data.Dataset.from_tensor_slices((features, labels))
    data = data.repeat().batch(_BATCH, drop_remainder=True).prefetch(2)
    return data.map(parse) if slow else data
  return input_fn


def _train(tmp_path, slow, accumulation_steps, caplog):
  """(the run's input wait shares, the progress lines) of 16 updates.

  The slow parse's update computes 10 ms (k micro-batches of it), the
  normal one 20 ms.
  """
  _, features, labels = tiny_models.generated_data("mlp", 64)
  estimator = es.make_estimator(
      _Computing(0.01 / accumulation_steps if slow else 0.02), model_dir=str(tmp_path / ("slow" if slow else "normal")),
      training_config=es.TrainingConfig(
          accumulation_steps=accumulation_steps),
      global_batch_size=_BATCH, progress_every_n_steps=5, random_seed=0)
  with caplog.at_level(logging.INFO):
    estimator.train(_input_fn(features, labels, slow), max_steps=16)
  lines = [r.getMessage() for r in caplog.records
           if r.getMessage().startswith("progress: ")]
  return estimator.progress.input_wait, lines


def _shares(line):
  """The progress line's input wait of one worker, as a fraction."""
  text = line.split("input wait ")[1].split("%")[0]
  return float(text) / 100


# The run's share, and every line's but the first: the first update warms
# the graph up for long enough that the input reads ahead, so the next ones
# find their batches ready.


def test_a_slow_parse_waits_most_of_each_update(tmp_path, caplog):
  shares, lines = _train(tmp_path, True, 2, caplog)
  assert len(shares) == 1 and shares[0] >= 0.5, shares
  assert len(lines) == 3 and all(_shares(l) >= 0.5 for l in lines[1:]), lines


def test_a_prefetched_input_hardly_waits(tmp_path, caplog):
  shares, lines = _train(tmp_path, False, 1, caplog)
  assert len(shares) == 1 and shares[0] <= 0.05, shares
  assert len(lines) == 3 and all(_shares(l) <= 0.05 for l in lines[1:]), lines


def test_measure_is_the_time_blocked_on_the_iterator():
  with tf.Graph().as_default():
    data = tf.data.Dataset.from_tensors(np.float32(1.0)).map(
        lambda x: tf.numpy_function(lambda v: time.sleep(0.2) or v, [x],
                                    tf.float32))
    features = tf.compat.v1.data.make_one_shot_iterator(data).get_next()
    wait, _, _ = input_wait.measure({"x": features}, None)
    with tf.compat.v1.Session() as session:
      measured = session.run(wait)
  # At least the parse's sleep; the bound above only says the measure is of
  # that wait, not of the whole run (session start-up on a loaded machine).
  assert 0.2 <= measured < 3.0


@pytest.mark.parametrize("shares, workers, text", [
    (None, 1, f"input wait not measured ({input_wait.NOT_MEASURED})"),
    ([0.624], 1, "input wait 62%"),
    ([0.02], 3, "input wait 2% (the chief's own; asynchronous workers "
                "exchange none)"),
    ([0.02, 0.64], 2, "input wait per worker 2% 64%"),
    ([0.01] * 9 + [0.7], 10, "input wait per worker median 1%, highest 70% "
                             "(worker 9)"),
])
def test_progress_text(shares, workers, text):
  assert input_wait.progress_text(shares, workers) == text


def test_progress_line_says_when_nothing_measures_the_wait(caplog):
  """A train op that build_train_op did not build (a canned estimator's)."""
  hook = hooks_lib.ProgressHook(_BATCH, every_n_steps=2)
  with tf.Graph().as_default():
    train_op = tf.compat.v1.train.get_or_create_global_step().assign_add(1)
    with caplog.at_level(logging.INFO), \
        tf.compat.v1.train.MonitoredSession(hooks=[hook]) as session:
      for _ in range(3):
        session.run(train_op)
  assert hook.input_wait is None
  assert hook.input_wait_summary() == {"share": None,
                                       "why": input_wait.NOT_MEASURED}
  assert any("input wait not measured" in r.getMessage()
             for r in caplog.records)


_NAMES = ["rank 0 (a)", "rank 1 (b)", "rank 2 (c)"]


@pytest.mark.parametrize("waits, cause", [
    ([0.0001, 0.0002, 0.049], ", slow because of its input (input wait 89% "
                              "of the update, the others' 0%)"),
    ([0.0001, 0.0002, 0.0003], " (not its input: input wait 1%)"),
])
def test_straggler_line_says_whether_the_input_is_why(waits, cause):
  line = stragglers.report([0.002, 0.002, 0.052], _NAMES, 2, 26,
                           waits=waits, update_seconds=0.055)
  assert line.endswith("rank 2 (c) at 26.00x" + cause), line


def test_a_wait_without_the_extra_time_is_not_why():
  """A slow parse that the prefetch hides from the update."""
  assert input_wait.slowed_by_input(2, [0.05, 0.05, 0.06],
                                    [0.0, 0.0, 0.004]) is False


def test_straggler_hook_reads_the_exchanged_waits():
  hook = stragglers.StragglerHook(_NAMES, every_n_steps=2)
  with tf.Graph().as_default():
    step = tf.compat.v1.train.get_or_create_global_step()
    seconds = tf.constant([0.002, 0.002, 0.052])
    waits = tf.constant([0.0001, 0.0002, 0.049])
    tf.compat.v1.add_to_collection(stragglers.COLLECTION, seconds)
    tf.compat.v1.add_to_collection(input_wait.COLLECTION, waits)
    train_op = tf.group(step.assign_add(1), seconds, waits)
    with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as session:
      for _ in range(3):
        session.run(train_op)
  assert len(hook.lines) == 2
  assert all("rank 2 (c) at 26.00x, slow because of its input" in line
             for line in hook.lines), hook.lines


def test_summaries_name_each_worker_or_this_one():
  with tf.Graph().as_default():
    input_wait.summaries(tf.constant([0.1]),
                         topology_lib.Topology(num_workers=3, worker_index=2))
    input_wait.summaries(tf.constant([0.1, 0.2]),
                         topology_lib.Topology(num_workers=2))
    tags = [op.inputs[0].op.get_attr("value").string_val[0].decode()
            for op in tf.compat.v1.get_default_graph().get_operations()
            if op.type == "ScalarSummary"]
  assert tags == [f"{input_wait.SUMMARY_PREFIX}/worker_2",
                  f"{input_wait.SUMMARY_PREFIX}/worker_0",
                  f"{input_wait.SUMMARY_PREFIX}/worker_1"]


def test_the_always_ready_reference_starts_no_tuning_thread():
  # A dataset of the framework's own (estimator_scale/data_options.py).
  with tf.Graph().as_default() as graph:
    input_wait.measure({"x": tf.constant([1.0])}, None)
  found = [op for op in graph.get_operations() if op.type == "OptionsDataset"]
  assert len(found) == 1, [op.type for op in graph.get_operations()]
  options = dataset_options_pb2.Options.FromString(
      found[0].get_attr("serialized_options"))
  assert options.autotune_options.HasField("enabled")
  assert not options.autotune_options.enabled

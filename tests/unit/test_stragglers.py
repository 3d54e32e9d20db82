"""The slow host named: the comparison, the chief's lines, the measurement."""
import json
import time

import pytest
import tensorflow as tf

from estimator_scale import errors
from estimator_scale import stragglers
from estimator_scale import topology as topology_lib
from estimator_scale.backends import reducers
from estimator_scale.backends import tf_config


@pytest.mark.parametrize("seconds, slow", [
    ([1.0, 1.0, 1.0, 2.0], [3]),
    ([1.0, 3.0], [1]),  # median 2: 3 > 2.5
    ([1.0, 1.6], []),  # median 1.3: 1.6 < 1.625
    ([-1.0, 1.0], []),  # median 0: no basis to name anyone, no division
    ([2.0, 1.0, 1.0, 1.0, 3.0], [4, 0]),  # slowest first
    ([0.0, 0.0, 0.0], []),
    ([5.0], []),
])
def test_workers_above_the_factor_times_the_median(seconds, slow):
  assert stragglers.slow_workers(seconds) == slow


def test_factor_must_exceed_one():
  with pytest.raises(errors.ConfigError, match="factor must be > 1, got 1"):
    stragglers.slow_workers([1.0, 2.0], factor=1)
  with pytest.raises(errors.ConfigError, match="every_n_steps must be >= 1"):
    stragglers.StragglerHook(["a", "b"], every_n_steps=0)


def test_report_names_the_slow_worker_with_its_host():
  line = stragglers.report([0.010, 0.011, 0.030],
                           ["rank 0 (a)", "rank 1 (b)", "rank 2 (c)"], 101,
                           200)
  assert line.startswith("compute per update, steps 101-200: rank 0 (a) "
                         "10.0 ms, rank 1 (b) 11.0 ms, rank 2 (c) 30.0 ms; "
                         "median 11.0 ms; slow")
  assert line.endswith("rank 2 (c) at 2.73x")
  calm = stragglers.report([0.010, 0.011], ["rank 0 (a)", "rank 1 (b)"], 1, 2)
  assert calm.endswith("none above 1.25x the median")
  with pytest.raises(ValueError, match="2 figures for 3 workers"):
    stragglers.report([0.1, 0.2], ["a", "b", "c"], 1, 2)


def _run_hook(hook, updates, seconds):
  """`updates` session runs of a graph whose exchanged figures are
  `seconds`, with `hook`."""
  with tf.Graph().as_default():
    step = tf.compat.v1.train.get_or_create_global_step()
    figures = tf.constant(seconds, tf.float32)
    tf.compat.v1.add_to_collection(stragglers.COLLECTION, figures)
    train_op = tf.group(step.assign_add(1), figures)
    with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as session:
      for _ in range(updates):
        session.run(train_op)


def test_hook_logs_every_n_updates_and_the_whole_run_at_the_end():
  hook = stragglers.StragglerHook(["worker 0 (a)", "worker 1 (b)",
                                   "worker 2 (c)"], every_n_steps=2)
  _run_hook(hook, 5, [0.01, 0.01, 0.05])
  # The first update (graph warm-up) is left out: 2-3, 4-5, then 2-5.
  assert [line.split(":")[0] for line in hook.lines] == [
      "compute per update, steps 2-3", "compute per update, steps 4-5",
      "compute per update, steps 2-5"]
  assert all(line.endswith("worker 2 (c) at 5.00x") for line in hook.lines)


def test_hook_without_figures_says_nothing():
  hook = stragglers.StragglerHook(["worker 0 (a)", "worker 1 (b)"], 1)
  with tf.Graph().as_default():
    train_op = tf.compat.v1.train.get_or_create_global_step().assign_add(1)
    with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as session:
      for _ in range(3):
        session.run(train_op)
  assert hook.lines == []


def test_measure_spans_the_work_before_the_exchange():
  """A gradient that takes 0.2 s shows as 0.2 s of this worker's compute."""
  pause = 0.2

  def slow_identity(x):
    time.sleep(pause)
    return x

  with tf.Graph().as_default():
    start, weight = stragglers.start_timing(tf.constant(2.0))
    grad = tf.numpy_function(slow_identity, [weight], tf.float32)
    seconds = stragglers.exchange(start, [grad, None], weight * 3.0,
                                  reducers.LocalReducer(),
                                  topology_lib.Topology())()
    assert tf.compat.v1.get_collection(stragglers.COLLECTION) == [seconds]
    with tf.compat.v1.Session() as session:
      measured = session.run(seconds)
  assert measured.shape == (1,)
  # The bound above says the measure is of the gradient's work, not of the
  # session's start-up, with room for a loaded machine.
  assert pause <= measured[0] < pause + 2.5


def test_tf_config_workers_named_by_task_and_host():
  cluster = {"chief": ["10.0.0.1:2222"], "worker": ["10.0.0.2:2222",
                                                    "node-c:2222"],
             "ps": ["10.0.0.9:2222"]}
  environ = {"TF_CONFIG": json.dumps(
      {"cluster": cluster, "task": {"type": "worker", "index": 0}})}
  assert tf_config.cluster_worker_labels(environ) == [
      "chief 0 (10.0.0.1)", "worker 0 (10.0.0.2)", "worker 1 (node-c)"]

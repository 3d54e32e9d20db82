"""Synchronous parameter servers in one process: two workers as two threads.

The accumulators and token queues are resources shared by name, so two
workers' train ops built into one graph and run from two threads meet in
them as tasks of a cluster do on a ps task. The multi-process equality with
one process is tests/integration/test_ps_sync_multiprocess.py.
"""
import json
import threading
import types

from absl import logging
import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale import backends
from estimator_scale import errors
from estimator_scale import run_config
from estimator_scale.backends import ps_sync
from estimator_scale.backends import reducers

_TABLE = np.arange(12, dtype=np.float32).reshape(6, 2) / 10
_RATE = 0.5


def _update(reducer, ids, x, table, weights, global_step):
  """One worker's update of a table lookup and a dense weight under SGD."""
  rows = tf.gather(table, ids)
  loss = tf.reduce_mean(tf.reduce_sum(rows, 1) * tf.reduce_sum(x * weights, 1))
  variables = [table, weights]
  grads = tf.gradients(loss, variables)
  assert isinstance(grads[0], tf.IndexedSlices)
  optimizer = tf.compat.v1.train.GradientDescentOptimizer(_RATE)
  if not reducer.applies_updates:
    return reducer.contribute(grads, variables, [], loss)
  reducer.expect(variables, loss)
  return reducer.apply_mean(optimizer, grads, variables, global_step)


def _expected(batches, start_table, start_weights):
  """Plain SGD on the mean of the workers' gradients, in numpy."""
  table, weights = start_table.copy(), start_weights.copy()
  grad_table, grad_weights = np.zeros_like(table), np.zeros_like(weights)
  for ids, x in batches:
    n = len(ids)
    dot = (x * weights).sum(1)
    np.add.at(grad_table, ids, np.repeat((dot / n)[:, None], 2, 1))
    grad_weights += (table[ids].sum(1)[:, None] * x).sum(0) / n
  return (table - _RATE * grad_table / len(batches),
          weights - _RATE * grad_weights / len(batches))


def test_two_workers_apply_one_mean_and_a_stale_gradient_is_dropped():
  batches = [(np.array([0, 2, 2]), np.ones((3, 2), np.float32)),
             (np.array([5, 2, 1]), np.full((3, 2), 2.0, np.float32))]
  with tf.Graph().as_default():
    global_step = tf.compat.v1.train.get_or_create_global_step()
    table = tf.compat.v1.get_variable("table", initializer=_TABLE)
    weights = tf.compat.v1.get_variable(
        "weights", initializer=np.array([0.3, -0.2], np.float32))
    ops = [_update(ps_sync.SyncReducer(2, index, index == 0),
                   tf.constant(ids), tf.constant(x), table, weights,
                   global_step)
           for index, (ids, x) in enumerate(batches)]
    # An accumulator of the chief's, found by its shared name.
    stale = tf.compat.v1.ConditionalAccumulator(
        tf.float32, shape=[2], shared_name="ps_sync/weights")
    marked = tf.compat.v1.placeholder(tf.int64, [])
    push = stale.apply_grad(tf.ones([2]), local_step=marked)
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      # A restart: the accumulators are new (step 0), the job at step 5.
      session.run(global_step.assign(5))
      start = session.run([table, weights])
      worker = threading.Thread(target=session.run, args=(ops[1],))
      worker.start()
      session.run(ops[0])
      worker.join(timeout=60)
      assert not worker.is_alive(), "the worker never got its token"
      got = session.run([table, weights, global_step])
      # A gradient computed at step 5 arrives after the update to 6.
      session.run(push, {marked: 5})
      dropped = session.run(stale.num_accumulated())
      session.run(push, {marked: 6})
      kept = session.run(stale.num_accumulated())
  want = _expected(batches, *start)
  np.testing.assert_allclose(got[0], want[0], atol=1e-6)
  np.testing.assert_allclose(got[1], want[1], atol=1e-6)
  assert got[2] == 6
  # Rows no worker touched stayed where they were.
  np.testing.assert_array_equal(got[0][[3, 4]], start[0][[3, 4]])
  assert (dropped, kept) == (0, 1)


def _ancestors(op):
  """Every op `op` waits for, by its inputs or control inputs."""
  seen, stack = set(), [op]
  while stack:
    current = stack.pop()
    for parent in [t.op for t in current.inputs] + list(current.control_inputs):
      if parent not in seen:
        seen.add(parent)
        stack.append(parent)
  return seen


def test_a_worker_is_let_go_only_once_every_figure_of_its_update_is_taken():
  # Let go first, a worker pushes its next update's figure (stragglers,
  # input wait) into an accumulator the chief has not taken yet, which sums
  # both: the job's last update then waits for a push that never comes.
  with tf.Graph().as_default() as graph:
    global_step = tf.compat.v1.train.get_or_create_global_step()
    table = tf.compat.v1.get_variable("table", initializer=_TABLE)
    weights = tf.compat.v1.get_variable(
        "weights", initializer=np.array([0.3, -0.2], np.float32))
    reducer = ps_sync.SyncReducer(2, 0, True)
    every = reducer.each_worker(tf.constant(0.5), 1)
    _update(reducer, tf.constant([0, 1]), tf.ones((2, 2)), table, weights,
            global_step)
    figures = every()
    tokens = [op for op in graph.get_operations()
              if op.type.startswith("QueueEnqueue")]
    assert tokens
    for token in tokens:
      assert figures.op in _ancestors(token), token.name


def test_workers_other_than_the_chief_do_not_reduce():
  reducer = ps_sync.SyncReducer(2, 1, is_chief=False)
  with tf.Graph().as_default(), pytest.raises(errors.UsageError,
                                              match="contribute"):
    reducer.all_mean([tf.ones([2])], [])
  assert reducers.LocalReducer().applies_updates


def test_ps_sync_needs_parameter_servers():
  with pytest.raises(errors.ConfigError,
                     match="ps_sync=True applies to distribution="
                           "'parameter_server' only; distribution='none'"):
    es.build_run_config("none", ps_sync=True)


def _cluster_env(monkeypatch, task_type="worker", index=0):
  monkeypatch.setenv("TF_CONFIG", json.dumps({
      "cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"],
                  "ps": ["localhost:3"]},
      "task": {"type": task_type, "index": index}}))


@pytest.mark.parametrize("sync,line", [
    (False, "parameter_server: asynchronous updates (the default)"),
    (True, "parameter_server: synchronous updates (ps_sync): each update "
           "averages the gradients of all 2 workers"),
])
def test_one_line_says_which_mode(sync, line, monkeypatch, tmp_path):
  _cluster_env(monkeypatch)
  said = []
  monkeypatch.setattr(logging, "info",
                      lambda message, *args: said.append(message % args))
  scale_config = es.build_run_config("parameter_server",
                                     model_dir=str(tmp_path), ps_sync=sync)
  assert scale_config.topology.synchronous == sync
  assert [m for m in said if m.startswith("parameter_server:")] == [
      m for m in said if line in m]
  assert any(line in m for m in said)
  # Either way the job's batch is split over the workers; asynchronous,
  # each worker's share is an update of its own.
  assert scale_config.topology.replica_batch_size(64) == 32
  assert scale_config.topology.examples_per_update(64) == (64 if sync else 32)
  waiting = [h for h in scale_config.hooks
             if isinstance(h, ps_sync.TimeoutHook)]
  assert len(waiting) == int(sync)


def test_a_timeout_names_the_task_and_the_update(monkeypatch, tmp_path):
  _cluster_env(monkeypatch, "worker", 0)
  monkeypatch.setenv("ESTIMATOR_SCALE_COLLECTIVE_TIMEOUT", "7")
  scale_config = es.build_run_config("parameter_server",
                                     model_dir=str(tmp_path), ps_sync=True)
  (hook,) = [h for h in scale_config.hooks
             if isinstance(h, ps_sync.TimeoutHook)]
  with tf.Graph().as_default():
    tf.compat.v1.train.get_or_create_global_step()
    hook.begin()
    assert hook.before_run(None).options.timeout_in_ms == 7000
  hook.after_run(None, tf.estimator.SessionRunValues(12, None, None))
  message = str(hook.timeout_error())
  assert message.startswith("ps_sync: worker 0 waited 7 s in the update "
                            "after step 12"), message


def _linear(scale_config):
  return tf.estimator.LinearClassifier(
      [tf.feature_column.numeric_column("x")],
      optimizer=es.canned_optimizer("SGD", scale_config),
      config=scale_config.run_config)


def test_a_canned_estimator_trained_directly_is_refused(monkeypatch,
                                                         tmp_path):
  # Its workers would each apply their own gradients, unsynchronised; the
  # refusal comes while the training graph is built, before any step.
  _cluster_env(monkeypatch, "chief", 0)
  scale_config = es.build_run_config("parameter_server",
                                     model_dir=str(tmp_path / "model"),
                                     ps_sync=True)
  data = lambda: tf.data.Dataset.from_tensors(({"x": [[1.0]]}, [[1]]))
  with pytest.raises(errors.ConfigError,
                     match=r"build_run_config\('parameter_server'\)"
                           r"\.run_config and is trained with its own "
                           r"train\(\).*es\.make_estimator"):
    _linear(scale_config).train(data, steps=1)
  assert not (tmp_path / "model").exists() or not list(
      (tmp_path / "model").glob("model.ckpt-*"))
  # Through the factory the guard is gone (placement is Estimator's own).
  made = es.make_estimator(_linear(scale_config), scale_config=scale_config)
  assert made.tf_estimator.config.device_fn is None


def test_only_jobs_the_factory_synchronises_carry_the_guard():
  horovod = backends.get("horovod")
  for topology, strategy, guarded in [
      (es.Topology(backend=horovod, num_workers=2), None, True),
      (es.Topology(backend=horovod, num_workers=1), None, False),
      (es.Topology(backend=backends.get("multi_worker_mirrored"),
                   num_workers=2), "a strategy", False),
      (es.Topology(backend=backends.get("parameter_server"),
                   num_workers=2), None, False),  # asynchronous
  ]:
    config = types.SimpleNamespace(train_distribute=strategy)
    scale_config = es.ScaleConfig(config, topology, None)
    assert run_config._synchronised_by_the_factory(scale_config) == guarded

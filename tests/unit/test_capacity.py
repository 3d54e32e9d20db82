"""A table no placement can hold is refused from the graph alone.

The graphs here declare a table (20 GiB where every worker holds it) and
its Adagrad accumulator without running them: building a graph allocates
nothing, so the decision is made from the variables' shapes and devices,
as a job makes it before its first step.
"""
import contextlib

import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale import environment
from estimator_scale import memory_limit
from estimator_scale.embeddings import capacity
from estimator_scale.embeddings import partitioning

GIB = 1 << 30
DIM = 64


def _graph_with_table(table_bytes, ps_tasks=0):
  """The `Capacity` of a table of float32 rows of `DIM` trained by Adagrad,
  unallocated: whole on every worker, or split over `ps_tasks` as
  parameter servers split it."""
  rows = table_bytes // (DIM * 4)
  with tf.Graph().as_default():
    placement = (tf.compat.v1.train.replica_device_setter(ps_tasks=ps_tasks)
                 if ps_tasks else None)
    splitting = (partitioning.partitioned_variables(ps_tasks, 64 << 20)
                 if ps_tasks else contextlib.nullcontext())
    with tf.compat.v1.device(placement):
      with splitting:
        table = tf.compat.v1.get_variable("clicks/table", [rows, DIM])
      loss = tf.reduce_sum(tf.nn.embedding_lookup(table, [0, 7]))
      global_step = tf.compat.v1.train.get_or_create_global_step()
      tf.compat.v1.train.AdagradOptimizer(0.1).minimize(loss, global_step)
    return capacity.measure()


@pytest.mark.parametrize("backend", ["horovod", "mirrored"])
def test_a_20_gib_table_is_refused_where_every_worker_holds_it(backend):
  measured = _graph_with_table(20 * GIB)
  assert measured.variable_bytes == 20 * GIB
  assert measured.largest == ("clicks/table", 20 * GIB)
  with pytest.raises(es.errors.ConfigError) as raised:
    capacity.check(measured, backend, 16 * GIB)
  message = str(raised.value)
  assert (f"each worker of distribution={backend} holds all of them, "
          "40960.0 MiB") in message, message
  assert "the largest, clicks/table, is 20480.0 MiB" in message, message
  assert ("distribution=parameter_server splits large variables over its ps "
          "tasks: 3 ps tasks of 16.0 GiB would each hold about 13.3 GiB"
         ) in message, message


def test_ps_tasks_too_few_for_the_table_are_told_how_many_would_do():
  measured = _graph_with_table(256 << 20, ps_tasks=4)
  assert set(measured.bytes_per_holder) == {f"ps:{i}" for i in range(4)}
  for size in measured.bytes_per_holder.values():  # a quarter of table+slot
    assert abs(size - (128 << 20)) < 1 << 20, measured.bytes_per_holder
  capacity.check(measured, "parameter_server", 160 << 20)
  with pytest.raises(es.errors.ConfigError,
                     match=r"ps task ps:0 holds them under parameter_server, "
                     r"128.0 MiB .*the largest, clicks/table/part_\d+, is "
                     r"[\d.]+ MiB.* above the 96.0 MiB .* add ps tasks: .* 6 "
                     r"ps tasks of 96.0 MiB would each hold about 85.3 MiB "
                     r"\(--ps 6\)"):
    capacity.check(measured, "parameter_server", 96 << 20)


def _estimator(distribution, model_dir):
  """An Estimator whose one table (16 MiB) and its Adagrad accumulator every
  worker holds."""
  scale_config = es.build_run_config(distribution, model_dir=str(model_dir))

  def model_fn(features, labels, mode):
    def loss(micro_features, micro_labels):
      table = tf.compat.v1.get_variable("clicks/table", [1 << 16, 64])
      rows = tf.nn.embedding_lookup(table, micro_features["id"])
      return tf.reduce_mean(tf.square(tf.reduce_sum(rows, 1) - micro_labels))
    train = es.build_train_op(loss, features, labels,
                              es.TrainingConfig(optimizer="adagrad"),
                              scale_config.topology)
    return tf.estimator.EstimatorSpec(mode, loss=train.loss,
                                      train_op=train.train_op)
  return es.make_estimator(model_fn, scale_config=scale_config)


def test_training_is_refused_before_its_first_step(tmp_path, monkeypatch):
  """The check runs where jobs train, once the graph is built and before
  a session starts: nothing is initialised, no checkpoint written, and the
  error is the framework's own. (It runs from a hook so that a strategy's
  autograph, mirrored's, cannot wrap it; mirrored needs its CPUs set before
  TensorFlow starts, which a test process shared with others cannot do.)"""
  distribution = "none"
  monkeypatch.setenv(environment.TASK_MEMORY, str(24 << 20))
  estimator = _estimator(distribution, tmp_path)
  with pytest.raises(es.errors.ConfigError,
                     match=rf"each worker of distribution={distribution} "
                     r"holds all of them, 32.0 MiB .* the largest, "
                     r"clicks/table, is 16.0 MiB.* 2 ps tasks of 24.0 MiB "
                     r"would each hold about 16.0 MiB"):
    estimator.train(lambda: tf.data.Dataset.from_tensors(
        ({"id": [0, 3]}, [0.0, 1.0])).repeat(), max_steps=1)
  assert tf.train.latest_checkpoint(str(tmp_path)) is None


def test_a_task_may_hold_its_memory_cgroups_limit(tmp_path, monkeypatch):
  """v1's memory controller, v2's unified one, and none (v1's unlimited)."""
  for lines, name, value, found in (
      ("4:memory:/job/task\n3:cpu:/\n", "memory/job/task/memory.limit_in_bytes",
       "1073741824\n", 1 << 30),
      ("0::/slurm/step\n", "slurm/step/memory.max", "536870912\n", 1 << 29),
      ("0::/slurm/step\n", "slurm/step/memory.max", "max\n", None),
      ("4:memory:/\n", "memory/memory.limit_in_bytes",
       "9223372036854771712\n", None)):
    (tmp_path / "cgroup").write_text(lines)
    path = tmp_path / "fs" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value)
    limit = memory_limit.cgroup_limit(str(tmp_path / "fs"),
                                      str(tmp_path / "cgroup"))
    assert limit == (None if found is None else (found, str(path)))
  monkeypatch.setattr(memory_limit, "cgroup_limit",
                      lambda: (1 << 30, "/sys/fs/cgroup/memory/x/memory."
                               "limit_in_bytes"))
  monkeypatch.delenv(environment.TASK_MEMORY, raising=False)
  assert capacity.task_memory() == (
      1 << 30, "this task's memory cgroup limit, "
      "/sys/fs/cgroup/memory/x/memory.limit_in_bytes")
  assert capacity.task_memory({environment.TASK_MEMORY: "4096"}) == (
      4096, environment.TASK_MEMORY)

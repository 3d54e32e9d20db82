"""Input builders: batch sizes, sharding, formats and their error messages."""
import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale import backends
from estimator_scale import topology as topology_lib
from estimator_scale.backends import coordinator as coordinator_lib


def _ids(dataset, batches):
  out = []
  for features, _ in dataset.take(batches):
    out.extend(features["id"].numpy().tolist())
  return out


def _worker(index, workers=2):
  return topology_lib.Topology(backend=backends.get("horovod"),
                               num_workers=workers,
                               worker_index=index, is_chief=index == 0)


def test_arrays_shard_disjointly_and_cover_everything():
  ids = np.arange(40)
  seen = []
  for w in range(2):
    fn = es.inputs.from_arrays({"id": ids}, ids, 8, topology=_worker(w),
                               seed=3)
    seen.append(set(_ids(fn(), 5)))  # 5 batches of 4 = one pass of 20
  assert not seen[0] & seen[1]
  assert seen[0] | seen[1] == set(range(40))


def test_replica_batch_is_global_over_workers_and_micro_batches():
  fn = es.inputs.from_arrays({"id": np.arange(64)}, np.arange(64), 32,
                             topology=_worker(0), accumulation_steps=4)
  features, _ = next(iter(fn()))
  assert features["id"].shape[0] == 16


@pytest.mark.parametrize("deterministic", [True, False])
def test_tfrecord_shards_by_file_and_by_record(deterministic, tmp_path):
  ids = np.arange(48)
  paths = es.inputs.write_tfrecord_shards(
      {"id": ids}, ids, str(tmp_path), num_shards=3)
  assert len(paths) == 3
  spec = {"id": tf.io.FixedLenFeature([], tf.int64),
          "label": tf.io.FixedLenFeature([], tf.int64)}
  for workers in (2, 4):  # 3 files: by file for 2 workers, by record for 4
    # Files stay a worker's own over epochs; records are the workers' slices
    # of each global batch, disjoint within one epoch.
    epochs = 3 if workers == 2 else 1
    seen = []
    for w in range(workers):
      fn = es.inputs.from_tfrecords(str(tmp_path / "*.tfrecord"), spec,
                                    "label", 4 * workers,
                                    topology=_worker(w, workers), seed=1,
                                    deterministic=deterministic)
      seen.append(set(_ids(fn(), 48 // workers // 4 * epochs)))
    assert set().union(*seen) == set(range(48))
    assert sum(len(s) for s in seen) == 48, workers


def test_eval_input_is_one_ordered_pass(tmp_path):
  ids = np.arange(10)
  es.inputs.write_tfrecord_shards({"id": ids}, ids, str(tmp_path), 2)
  spec = {"id": tf.io.FixedLenFeature([], tf.int64),
          "label": tf.io.FixedLenFeature([], tf.int64)}
  fn = es.inputs.from_tfrecords(str(tmp_path / "*"), spec, "label", 4,
                                training=False)
  assert sorted(_ids(fn(), 100)) == list(range(10))


def test_tfrecords_without_label_key_yield_features_only(tmp_path):
  ids = np.arange(10)
  es.inputs.write_tfrecord_shards({"id": ids}, ids, str(tmp_path), 2)
  spec = {"id": tf.io.FixedLenFeature([], tf.int64)}
  fn = es.inputs.from_tfrecords(str(tmp_path / "*"), spec, None, 4,
                                training=False)
  batches = list(fn())
  assert all(isinstance(batch, dict) and list(batch) == ["id"]
             for batch in batches)
  assert sorted(np.concatenate([b["id"] for b in batches])) == list(range(10))


def test_csv(tmp_path):
  path = tmp_path / "a.csv"
  path.write_text("x,y,label\n1.0,2.0,1\n3.0,4.0,0\n")
  fn = es.inputs.from_csv(str(path), ["x", "y", "label"], "label",
                          [[0.0], [0.0], [0]], 2, training=False)
  features, labels = next(iter(fn()))
  assert features["y"].numpy().tolist() == [2.0, 4.0]
  assert labels.numpy().tolist() == [1, 0]


def test_csv_wrong_column_count_names_file_and_line(tmp_path):
  path = tmp_path / "bad.csv"
  path.write_text("x,y,label\n1.0,2.0,1\n3.0,0\n")
  with pytest.raises(ValueError, match=r"bad\.csv:3: expected 3"):
    es.inputs.from_csv(str(path), ["x", "y", "label"], "label",
                       [[0.0], [0.0], [0]], 2)


def test_glob_that_matches_nothing():
  with pytest.raises(ValueError, match=r"TFRecord pattern '/nonexistent/\*"):
    es.inputs.from_tfrecords("/nonexistent/*.tfrecord", {}, "label", 8)


def test_empty_data_set():
  with pytest.raises(ValueError, match="empty"):
    es.inputs.from_arrays({"x": np.zeros((0, 2))}, np.zeros(0), 8)


def test_batch_that_does_not_divide_names_valid_values():
  with pytest.raises(ValueError, match=r"^global_batch_size=10 .* multiple "
                     r"of 4, e\.g\. 8 or 12"):
    es.inputs.from_arrays({"x": np.zeros((16, 2))}, np.zeros(16), 10,
                          topology=_worker(0), accumulation_steps=2)


def test_synthetic_shapes():
  fn = es.inputs.synthetic({"image": (32, 32, 3)}, 8, num_classes=10)
  features, labels = next(iter(fn()))
  assert features["image"].shape == (8, 32, 32, 3)
  assert labels.numpy().max() < 10


def test_file_builders_carry_their_files_and_arrays_none(tmp_path):
  ids = np.arange(8)
  paths = es.inputs.write_tfrecord_shards({"id": ids}, ids, str(tmp_path), 2)
  spec = {"id": tf.io.FixedLenFeature([], tf.int64),
          "label": tf.io.FixedLenFeature([], tf.int64)}
  records = es.inputs.from_tfrecords(str(tmp_path / "*.tfrecord"), spec,
                                     "label", 4)
  assert records.files == tuple(paths)
  (tmp_path / "a.csv").write_text("x,label\n1.0,1\n")
  csv = es.inputs.from_csv(str(tmp_path / "*.csv"), ["x", "label"], "label",
                           [[0.0], [0]], 1)
  assert csv.files == (str(tmp_path / "a.csv"),)
  assert es.inputs.from_arrays({"id": ids}, ids, 4).files == ()


def test_csv_lines_parse_as_the_caller_says(tmp_path):
  """The shared CSV reader with a parse that yields features alone."""
  path = tmp_path / "a.csv"
  path.write_text("x,y\n1.0,2.0\n3.0,4.0\n5.0,6.0\n")

  def parse_line(line):
    x, y = tf.io.decode_csv(line, [[0.0], [0.0]])
    return {"sum": x + y}

  fn = es.inputs.from_csv_lines([str(path)], parse_line, 2, training=False)
  batches = list(fn())
  assert [b["sum"].numpy().tolist() for b in batches] == [[3.0, 7.0], [11.0]]
  assert fn.files == (str(path),)


class _Recording:
  """A coordinator that records the input_fn each call hands it."""

  can_broadcast = True

  def __init__(self, topology):
    self.topology = topology
    self.given = []

  def worker_labels(self):
    return [f"worker {i}" for i in range(self.topology.num_workers)]

  def train(self, estimator, input_fn, hooks, steps, max_steps,
            listeners=()):
    del estimator, hooks, steps, listeners
    self.given.append(input_fn)
    return coordinator_lib.TrainResult(max_steps,
                                       coordinator_lib.StopReason.TARGET)

  def evaluate(self, estimator, input_fn, **kwargs):
    self.given.append(input_fn)
    return {}

  def predict(self, estimator, input_fn, **kwargs):
    self.given.append(input_fn)
    return iter(())


def _estimator(topology, accumulation_steps=1):
  """The framework's Estimator of `topology`, its coordinator recording."""
  scale_config = es.ScaleConfig(tf.estimator.RunConfig(), topology,
                                _Recording(topology))
  return es.Estimator(None, scale_config, es.TrainingConfig(
      accumulation_steps=accumulation_steps))


def test_an_input_without_topology_takes_the_estimators():
  """Left out, the topology is the Estimator's: the ranks read disjoint
  halves of every global batch, 4 examples each, where a default of one
  local process would have every rank read all 8, in the same order."""
  ids = np.arange(40)
  seen = []
  for w in range(2):
    estimator = _estimator(_worker(w))
    fn = es.inputs.from_arrays({"id": ids}, ids, 8, seed=3)
    assert fn.topology is None
    estimator.train(fn, max_steps=5)
    (given,) = estimator.coordinator.given
    assert given.topology is estimator.topology
    features, _ = next(iter(given()))
    assert features["id"].shape[0] == 4
    seen.append(set(_ids(given(), 5)))
    # The same reading as an input built with topology=estimator.topology.
    explicit = es.inputs.from_arrays({"id": ids}, ids, 8, seed=3,
                                     topology=estimator.topology)
    assert _ids(given(), 5) == _ids(explicit(), 5)
    estimator.evaluate(es.inputs.from_arrays({"id": ids}, ids, 8,
                                             training=False))
    estimator.predict(fn)
    assert all(g.topology is estimator.topology
               for g in estimator.coordinator.given)
  assert not seen[0] & seen[1]
  assert seen[0] | seen[1] == set(range(40))


@pytest.mark.parametrize("backend", ["horovod", "parameter_server",
                                     "multi_worker_mirrored"])
def test_every_file_builder_takes_the_estimators_topology(backend, tmp_path):
  ids = np.arange(24)
  es.inputs.write_tfrecord_shards({"id": ids}, ids, str(tmp_path), 4)
  (tmp_path / "a.csv").write_text(
      "id,label\n" + "".join(f"{i},{i}\n" for i in range(24)))
  spec = {"id": tf.io.FixedLenFeature([], tf.int64),
          "label": tf.io.FixedLenFeature([], tf.int64)}
  builders = {
      "from_tfrecords": lambda: es.inputs.from_tfrecords(
          str(tmp_path / "*.tfrecord"), spec, "label", 8, seed=1),
      "from_csv": lambda: es.inputs.from_csv(
          str(tmp_path / "a.csv"), ["id", "label"], "label", [[0], [0]], 8),
      "synthetic": lambda: es.inputs.synthetic({"id": ()}, 8, num_classes=2),
  }
  for name, build in builders.items():
    seen = []
    for w in range(2):
      topology = topology_lib.Topology(backend=backends.get(backend),
                                       num_workers=2, worker_index=w,
                                       is_chief=w == 0)
      estimator = _estimator(topology)
      estimator.train(build(), max_steps=1)
      (given,) = estimator.coordinator.given
      assert given.topology is topology, name
      features, _ = next(iter(given()))
      assert features["id"].shape[0] == 4, name
      if name != "synthetic":
        seen.append(set(_ids(given(), 3)))
    if seen:
      assert not seen[0] & seen[1] and len(seen[0] | seen[1]) == 24, name


@pytest.mark.parametrize("built_for,runs,differ", [
    (dict(num_workers=2, worker_index=1), dict(num_workers=4, worker_index=1),
     "num_workers differ"),
    (dict(num_workers=2, worker_index=0), dict(num_workers=2, worker_index=1,
                                               is_chief=False),
     "worker_index, is_chief differ"),
    (dict(backend="none"), dict(backend="horovod"), "backend differ"),
    (dict(replicas_per_worker=2, backend="mirrored"),
     dict(replicas_per_worker=1, backend="mirrored"),
     "replicas_per_worker differ"),
    (dict(backend="parameter_server", num_workers=2),
     dict(backend="ps_sync", num_workers=2), "synchronous differ"),
])
def test_an_input_built_for_another_topology_is_refused_naming_both(
    built_for, runs, differ):
  def topology(backend="horovod", **fields):
    made = (backends.get("parameter_server").synchronized()
            if backend == "ps_sync" else backends.get(backend))
    return topology_lib.Topology(backend=made, **fields)
  mine, theirs = topology(**built_for), topology(**runs)
  estimator = _estimator(theirs)
  fn = es.inputs.from_arrays({"x": np.zeros((16, 2))}, np.zeros(16), 8,
                             topology=mine)
  with pytest.raises(es.errors.ConfigError) as raised:
    estimator.train(fn, max_steps=1)
  message = str(raised.value)
  assert "\n" not in message
  assert message.startswith(f"from_arrays: inputs built for "
                            f"{mine.describe()} but the Estimator runs "
                            f"{theirs.describe()} ({differ})"), message
  assert message.endswith("leave topology out to take the Estimator's, or "
                          "pass estimator.topology")
  assert not estimator.coordinator.given
  # The Estimator's own topology, or one equal to it, is taken.
  for same in (theirs, topology(**runs)):
    estimator.train(es.inputs.from_arrays(
        {"x": np.zeros((16, 2))}, np.zeros(16), 8, topology=same),
        max_steps=1)
  assert len(estimator.coordinator.given) == 2


def test_a_batch_that_does_not_divide_over_the_estimators_job_fails_first():
  """Checked when the Estimator takes the input, before anything runs."""
  estimator = _estimator(_worker(0, 4), accumulation_steps=2)
  fn = es.inputs.from_arrays({"x": np.zeros((64, 2))}, np.zeros(64), 12)
  with pytest.raises(es.errors.ConfigError,
                     match=r"^global_batch_size=12 does not divide into 4 "
                     r"replica\(s\) x 2 accumulation step\(s\) = 8 .* e\.g\. "
                     r"8 or 16$"):
    estimator.train(fn, max_steps=1)
  assert not estimator.coordinator.given
  # The input's own accumulation_steps, where given, is kept.
  estimator.train(es.inputs.from_arrays(
      {"x": np.zeros((64, 2))}, np.zeros(64), 12, accumulation_steps=3),
      max_steps=1)
  # What needs no topology is still checked when the input is built.
  with pytest.raises(es.errors.ConfigError, match="global_batch_size=6 .* "
                     r"1 replica\(s\) x 4"):
    es.inputs.from_arrays({"x": np.zeros((16, 2))}, np.zeros(16), 6,
                          accumulation_steps=4)


def test_without_an_estimator_of_the_framework_a_larger_job_is_refused():
  fn = es.inputs.from_arrays({"x": np.zeros((16, 2))}, np.zeros(16), 8)
  context = tf.distribute.InputContext(num_input_pipelines=2,
                                       input_pipeline_id=0,
                                       num_replicas_in_sync=2)
  with pytest.raises(es.errors.ConfigError,
                     match=r"^from_arrays: built without topology= and called "
                     r"by an Estimator of 2 worker\(s\), 2 replica\(s\) in "
                     r"sync that es\.make_estimator did not make"):
    fn(input_context=context)
  # One local process (a plain Estimator, a call by hand) reads it all;
  # evaluation is one pass over everything whatever the job.
  features, _ = next(iter(fn()))
  assert features["x"].shape[0] == 8
  evaluation = es.inputs.from_arrays({"x": np.zeros((16, 2))}, np.zeros(16),
                                     8, training=False)
  assert next(iter(evaluation(input_context=context)))[0]["x"].shape[0] == 8


def test_no_builder_starts_tf_datas_tuning_thread(tmp_path):
  # Its thread can make closing a session wait up to a minute (see
  # estimator_scale/data_options.py); what a builder reads stays as tuned.
  ids = np.arange(16)
  es.inputs.write_tfrecord_shards({"id": ids}, ids, str(tmp_path), 2)
  spec = {"id": tf.io.FixedLenFeature([], tf.int64),
          "label": tf.io.FixedLenFeature([], tf.int64)}
  (tmp_path / "a.csv").write_text("x,label\n1.0,1\n3.0,0\n")
  builders = [
      es.inputs.from_arrays({"id": ids}, ids, 4, seed=1),
      es.inputs.from_tfrecords(str(tmp_path / "*.tfrecord"), spec, "label",
                               4, seed=1),
      es.inputs.from_csv(str(tmp_path / "a.csv"), ["x", "label"], "label",
                         [[0.0], [0]], 2, training=False)]
  for fn in builders:
    dataset = fn()
    assert dataset.options().autotune.enabled is False, fn
    assert next(iter(dataset)) is not None

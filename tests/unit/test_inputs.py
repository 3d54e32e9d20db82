"""Input builders: batch sizes, sharding, formats and their error messages."""
import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale import backends
from estimator_scale import topology as topology_lib


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

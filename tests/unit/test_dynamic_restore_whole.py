"""One process resuming a checkpoint of Horovod ranks, in one process.

The ranks leave rank 0's checkpoint without the tables and the tables in
`sharded_tables/ckpt-<step>`; one process's Saver restores one checkpoint,
so the two are joined first. The jobs themselves, both ways, are
tests/integration/test_dynamic_restore_one_process.py.
"""
import collections
import os
import types

import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale import errors
from estimator_scale.embeddings import dynamic
from estimator_scale.embeddings import dynamic_reshard
from estimator_scale.embeddings import shard_checkpoints
from estimator_scale.embeddings import sharded

_Spec = collections.namedtuple("_Spec", "scaffold")


def _save(prefix, values):
  """Writes {name: value} as the checkpoint `prefix`."""
  with tf.Graph().as_default(), tf.compat.v1.Session() as session:
    session.run(tf.raw_ops.SaveV2(
        prefix=prefix, tensor_names=list(values),
        shape_and_slices=[""] * len(values),
        tensors=[tf.constant(v) for v in values.values()]))


def _ranks_saved(model_dir):
  """A model_dir as 2 ranks leave it at step 5."""
  _save(os.path.join(model_dir, "model.ckpt-5"),
        {"global_step": tf.constant(5, tf.int64), "dense": [1.0, 2.0]})
  tf.compat.v1.train.update_checkpoint_state(
      model_dir, os.path.join(model_dir, "model.ckpt-5"))
  _save(os.path.join(model_dir, "sharded_tables", "ckpt-5"),
        {"table": [[3.0], [4.0]], dynamic_reshard.RANKS: tf.constant(
            2, tf.int64)})


def _resumed(model_dir, workers):
  """Whether one training graph with the whole `table`, resuming, starts
  its session with its dynamic table's sketch cleared."""
  with tf.Graph().as_default():
    tf.compat.v1.train.get_or_create_global_step()
    es.dynamic_embedding(tf.constant([1], tf.int64), 4, 10, min_count=2)
    (sketch,) = [t.sketch for t in dynamic.tables()]
    # The checkpoints here hold `table` alone: the dynamic table's sketch
    # is what is looked at.
    tf.compat.v1.get_collection_ref(sharded.WHOLE_COLLECTION)[:] = [
        tf.compat.v1.get_variable("table", [2, 1])]
    config = types.SimpleNamespace(model_dir=model_dir,
                                   num_worker_replicas=workers)
    scaffold = shard_checkpoints._resume_tables_whole(  # pylint: disable=protected-access
        _Spec(tf.compat.v1.train.Scaffold()), config).scaffold
    local_init = (scaffold.local_init_op
                  or tf.compat.v1.train.Scaffold.default_local_init_op())
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      session.run(sketch.assign(tf.ones_like(sketch)))  # as restored
      session.run(local_init)
      return not session.run(sketch).any()


def test_one_process_resumes_the_ranks_checkpoint_joined(tmp_path):
  _ranks_saved(str(tmp_path))
  # The sketch is laid out by rank: cleared before Estimator's saver
  # writes the session's first checkpoint, which says one process.
  assert _resumed(str(tmp_path), 1)
  latest = tf.train.latest_checkpoint(str(tmp_path))
  assert latest == str(tmp_path / "whole-tables-ckpt-5")
  reader = tf.train.load_checkpoint(latest)
  assert reader.get_tensor("dense").tolist() == [1.0, 2.0]
  assert reader.get_tensor("table").tolist() == [[3.0], [4.0]]
  # What the ranks saved stays, for a restart on ranks.
  assert (tmp_path / "model.ckpt-5.index").exists()
  assert (tmp_path / "sharded_tables" / "ckpt-5.index").exists()
  # Resumed again before it saved, it reads the joined checkpoint as it is.
  assert _resumed(str(tmp_path), 1)
  assert tf.train.latest_checkpoint(str(tmp_path)) == latest


def test_one_process_passes_over_a_save_the_ranks_did_not_merge(tmp_path):
  # A rank was lost between rank 0's checkpoint of step 10 and the merge:
  # its dense variables match no tables, so step 5 is resumed, as on ranks.
  model_dir = str(tmp_path)
  _ranks_saved(model_dir)
  token = shard_checkpoints._TOKEN  # pylint: disable=protected-access
  (tmp_path / shard_checkpoints.DIRECTORY / token).write_text("")
  unmerged = os.path.join(model_dir, "model.ckpt-10")
  _save(unmerged, {"global_step": tf.constant(10, tf.int64),
                   "dense": [5.0, 6.0]})
  tf.compat.v1.train.update_checkpoint_state(
      model_dir, unmerged, all_model_checkpoint_paths=[
          os.path.join(model_dir, "model.ckpt-5"), unmerged])
  assert _resumed(model_dir, 1)
  latest = tf.train.latest_checkpoint(model_dir)
  assert latest == str(tmp_path / "whole-tables-ckpt-5")
  reader = tf.train.load_checkpoint(latest)
  assert reader.get_tensor("dense").tolist() == [1.0, 2.0]
  assert reader.get_tensor("table").tolist() == [[3.0], [4.0]]


def test_several_workers_are_refused_naming_the_model_dir(tmp_path):
  _ranks_saved(str(tmp_path))
  with pytest.raises(errors.ConfigError, match=str(tmp_path)):
    _resumed(str(tmp_path), 3)


def test_one_processs_own_checkpoint_keeps_its_sketch(tmp_path):
  prefix = str(tmp_path / "model.ckpt-5")
  _save(prefix, {"global_step": tf.constant(5, tf.int64),
                 "table": [[3.0], [4.0]]})
  tf.compat.v1.train.update_checkpoint_state(str(tmp_path), prefix)
  assert not _resumed(str(tmp_path), 1)


def test_one_processs_checkpoint_says_one_rank(tmp_path):
  _save(str(tmp_path / "c"), {"global_step": tf.constant(7, tf.int64)})
  assert dynamic_reshard.ranks_saved(str(tmp_path / "c")) == 1


@pytest.mark.parametrize("model_dir", ["runs/x", "runs/x/"])
def test_a_relative_model_dir_names_the_joined_checkpoint(tmp_path,
                                                          monkeypatch,
                                                          model_dir):
  # TensorFlow rewrites the state's paths relative to a model_dir given
  # relative (or an object store's, which os.path calls relative).
  monkeypatch.chdir(tmp_path)
  os.makedirs(model_dir)
  _ranks_saved(model_dir)
  _resumed(model_dir, 1)
  latest = tf.train.latest_checkpoint(model_dir)
  assert os.path.normpath(latest) == os.path.join("runs", "x",
                                                  "whole-tables-ckpt-5")
  assert tf.train.load_checkpoint(latest).get_tensor("table").tolist() == [
      [3.0], [4.0]]


def _sketch():
  """The sketch of a dynamic table in a training graph being built."""
  tf.compat.v1.train.get_or_create_global_step()
  es.dynamic_embedding(tf.constant([1], tf.int64), 4, 10, min_count=2)
  (table,) = dynamic.tables()
  return table.sketch


def test_the_first_save_after_a_restore_of_ranks_has_a_cleared_sketch(
    tmp_path):
  # Estimator's saver writes a checkpoint as the session starts; it says
  # one process, so a restart from it keeps whatever sketch it holds.
  model_dir = str(tmp_path)
  with tf.Graph().as_default():
    sketch = _sketch()
    tf.compat.v1.Variable(tf.constant(2, tf.int64), name=dynamic_reshard.RANKS)
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      session.run(sketch.assign(tf.ones_like(sketch)))
      tf.compat.v1.train.Saver().save(
          session, os.path.join(model_dir, "model.ckpt"), global_step=5)
  with tf.Graph().as_default():
    name = _sketch().op.name
    config = types.SimpleNamespace(model_dir=model_dir,
                                   num_worker_replicas=1)
    spec = shard_checkpoints._resume_tables_whole(  # pylint: disable=protected-access
        _Spec(tf.compat.v1.train.Scaffold()), config)
    with tf.compat.v1.train.MonitoredTrainingSession(
        checkpoint_dir=model_dir, scaffold=spec.scaffold,
        save_checkpoint_steps=100, save_summaries_steps=None,
        log_step_count_steps=None):
      pass
  latest = tf.train.latest_checkpoint(model_dir)
  assert dynamic_reshard.ranks_saved(latest) == 1
  assert not tf.train.load_checkpoint(latest).get_tensor(name).any()

"""Saves of sharded tables that did not finish, in one process.

Rank 0 of N is played here by `_Ranks`, whose collectives answer as N ranks
alike would: what is under test is which parts rank 0 merges, when it
refuses to, and which checkpoint an elastic restart resumes from when the
latest lacks its tables. The real 2 -> 3 ranks change is
tests/integration/test_sharded_elastic.py.
"""
import os
import pathlib
import threading
import time

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.ops import variables as tf_variables  # pylint: disable=g-direct-tensorflow-import

import estimator_scale as es
from estimator_scale import environment
from estimator_scale.embeddings import deltas
from estimator_scale.embeddings import shard_checkpoints
from estimator_scale.embeddings import sharded
from tools.rig.chaos import core
from tools.rig.chaos import moments as chaos_moments

ROWS = np.arange(14, dtype=np.float32).reshape(7, 2)


class _Ranks:
  """Rank 0 of `size` ranks: a sum over the ranks is `size` times its own."""

  Sum = "sum"

  def __init__(self, size):
    self._size = size

  def rank(self):
    return 0

  def size(self):
    return self._size

  def broadcast(self, value, root_rank, name):
    del root_rank, name
    return tf.identity(value)

  def allreduce(self, value, op, name):
    del op, name
    return value * self._size


def _slice(name, rows, first):
  """A local variable holding `rows` as its slice of a 7 x 2 table."""
  variable = tf.compat.v1.get_variable(
      name, initializer=rows,
      collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])
  variable._set_save_slice_info(tf_variables.Variable.SaveSliceInfo(  # pylint: disable=protected-access
      "model/table", list(ROWS.shape), [first, 0], list(rows.shape)))
  return variable


def _save_as_rank_0(model_dir, size, step, resumed_at=None):
  """Rank 0 of `size` ranks, its session begun at `resumed_at` (default:
  `step`), saves its rows of the table at `step`."""
  _, rows = sharded.shard_range(len(ROWS), size, 0)
  with tf.Graph().as_default():
    global_step = tf.compat.v1.train.get_or_create_global_step()
    _slice("shard", ROWS[:rows], 0)
    hook = shard_checkpoints.ShardCheckpointHook(str(model_dir), None,
                                                 _Ranks(size))
    hook.begin()
    with tf.compat.v1.Session() as sess:
      sess.run([tf.compat.v1.global_variables_initializer(),
                tf.compat.v1.local_variables_initializer()])
      sess.run(global_step.assign(step if resumed_at is None
                                  else resumed_at))
      hook.after_create_session(sess, None)
      sess.run(global_step.assign(step))
      hook.end(sess)


def test_a_save_merges_its_own_parts_and_clears_an_unfinished_ones(tmp_path):
  """A save of step 5 by 2 ranks stopped after rank 1 wrote its rows; the
  job, resumed on 1 rank, saves step 5 again: its merge holds its own rows
  only, and the other save's part is gone."""
  tables = tmp_path / shard_checkpoints.DIRECTORY
  with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    sess.run(tf.raw_ops.SaveV2(
        prefix=str(tables / "ckpt-5-of2-rank1-part0"),
        tensor_names=["model/table"], shape_and_slices=["7 2 4,3:-"],
        tensors=[tf.fill([3, 2], -1.0)]))
  _save_as_rank_0(tmp_path, 1, 5)
  merged = tf.train.load_checkpoint(str(tables / "ckpt-5"))
  np.testing.assert_array_equal(merged.get_tensor("model/table"), ROWS)
  assert sorted(p.name for p in tables.iterdir()) == [
      "ckpt-5.data-00000-of-00001", "ckpt-5.index", "shared-dir-token"]


def test_rank_0_refuses_to_merge_without_every_ranks_parts(tmp_path):
  """Rank 1 says it wrote its part, which rank 0 cannot see."""
  with pytest.raises(es.errors.ConfigError,
                     match=r"^rank 0 finds 1 parts of the sharded tables for "
                     r"\S*sharded_tables/ckpt-5, where the 2 ranks wrote 2: "
                     r"every rank must write"):
    _save_as_rank_0(tmp_path, 2, 5)
  assert not (tmp_path / shard_checkpoints.DIRECTORY / "ckpt-5.index").exists()


def _estimator_checkpoints(model_dir, steps):
  """model.ckpt-<step> of each of `steps`, as rank 0's Estimator saves."""
  with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    global_step = tf.compat.v1.train.get_or_create_global_step()
    saver = tf.compat.v1.train.Saver()
    for step in steps:
      sess.run(global_step.assign(step))
      saver.save(sess, str(model_dir / "model.ckpt"), global_step=step)


def test_a_save_removes_the_tables_of_checkpoints_the_estimator_dropped(
    tmp_path):
  """The tables of step 10, whose Estimator checkpoint is gone (past
  keep_checkpoint_max), and a part an unfinished save of it left, go at the
  save of step 30; step 20's, whose checkpoint the Estimator keeps, stay."""
  tables = tmp_path / shard_checkpoints.DIRECTORY
  _save_as_rank_0(tmp_path, 1, 20)
  for name in ("ckpt-10.index", "ckpt-10.data-00000-of-00001",
               "ckpt-10-of2-rank1-part0.index"):
    (tables / name).write_bytes(b"")
  _estimator_checkpoints(tmp_path, (20,))
  with tf.Graph().as_default():
    global_step = tf.compat.v1.train.get_or_create_global_step()
    _slice("shard", ROWS, 0)
    hook = shard_checkpoints.ShardCheckpointHook(str(tmp_path), 10,
                                                 _Ranks(1))
    hook.begin()
    with tf.compat.v1.Session() as sess:
      sess.run([tf.compat.v1.global_variables_initializer(),
                tf.compat.v1.local_variables_initializer(),
                global_step.assign(20)])
      hook.after_create_session(sess, None)  # resumes step 20's tables
      sess.run(global_step.assign(30))
      hook.after_run(tf.compat.v1.train.SessionRunContext((), sess), None)
  assert sorted({p.name.split(".")[0] for p in tables.iterdir()}) == [
      "ckpt-20", "ckpt-30", "shared-dir-token"]


def test_a_full_save_the_kept_checkpoints_deltas_follow_is_kept(tmp_path):
  """Step 12's tables are step 10's full save and a delta: the Estimator
  keeps model.ckpt-12 only, so ckpt-10 and its deltas stay, while step
  4's, which no kept checkpoint reaches, go with their deltas."""
  tables = tmp_path / shard_checkpoints.DIRECTORY
  for base in ("4", "10"):
    (tables / "deltas" / base).mkdir(parents=True)
  with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    for prefix, tensors in (
        (tables / "ckpt-4", {"model/table": ROWS}),
        (tables / "ckpt-10", {"model/table": ROWS}),
        (tables / "deltas" / "4" / "delta-6", {deltas.AFTER: 4}),
        (tables / "deltas" / "10" / "delta-12", {deltas.AFTER: 10})):
      sess.run(tf.raw_ops.SaveV2(
          prefix=str(prefix), tensor_names=list(tensors),
          shape_and_slices=[""] * len(tensors),
          tensors=[tf.constant(v) for v in tensors.values()]))
  _estimator_checkpoints(tmp_path, (12,))
  assert shard_checkpoints.tables_of(str(tmp_path / "model.ckpt-12")) == (
      str(tables / "ckpt-10"), [str(tables / "deltas" / "10" / "delta-12")])
  shard_checkpoints.drop_unkept(str(tables), str(tmp_path), 30)
  assert sorted(p.name.split(".")[0] for p in tables.glob("ckpt-*")) == [
      "ckpt-10", "ckpt-10"]
  assert sorted(p.name for p in (tables / "deltas").iterdir()) == ["10"]


def test_a_restart_resumes_from_the_latest_checkpoint_with_its_tables(
    tmp_path):
  """Rank 0 wrote model.ckpt-8, then a rank was lost before the ranks saved
  the tables of step 8: the restart resumes from step 4, whose are merged."""
  _save_as_rank_0(tmp_path, 1, 4)  # the tables of 4, and the shared token
  _estimator_checkpoints(tmp_path, [0, 4, 8])
  latest = shard_checkpoints.resume_where_tables_were_merged(str(tmp_path))
  assert latest == str(tmp_path / "model.ckpt-8")
  assert tf.train.latest_checkpoint(str(tmp_path)) == str(
      tmp_path / "model.ckpt-4")
  # At step 4 it has its tables: left as it is; and so is a model_dir
  # without sharded tables.
  plain = tmp_path / "plain"
  _estimator_checkpoints(plain, [0, 8])
  for model_dir, step in ((tmp_path, 4), (plain, 8)):
    assert shard_checkpoints.resume_where_tables_were_merged(
        str(model_dir)) is None
    assert tf.train.latest_checkpoint(str(model_dir)) == str(
        model_dir / f"model.ckpt-{step}")


@pytest.fixture(name="small_disk")
def _small_disk(tmp_path):
  """A model_dir on a tmpfs of 2 MiB, which a fill leaves no room on."""
  if os.geteuid() != 0:
    pytest.skip("mounting a small disk needs root")
  with core.small_disk(str(tmp_path / "model"), "2m") as path:
    yield pathlib.Path(path)


def test_a_merge_the_disk_fills_under_leaves_no_checkpoint_to_read(
    small_disk, monkeypatch):
  """The fault of `python -m tools.rig.chaos --case click --backend slurm
  --seed 3 --gap 45 150`'s seventh: the model_dir's disk filled while rank
  0 merged the tables of step 6250. The merge fails; its torn index was
  read by every restart, which failed in turn, until the job gave up. Now
  no checkpoint of the step is there, and a restart resumes from step 4."""
  _save_as_rank_0(small_disk, 1, 4)
  # Rank 0's Estimator writes its checkpoint of a step before the tables.
  _estimator_checkpoints(small_disk, [0, 4, 8])
  for name, value in chaos_moments.environ(str(small_disk.parent)).items():
    monkeypatch.setenv(name, value)
  (small_disk.parent / "merge.armed").write_text("")
  filled = []

  def fill_when_merging():
    deadline = time.monotonic() + 60
    while not list(small_disk.parent.glob("merge.*.*")):
      if time.monotonic() > deadline:
        return
      time.sleep(0.01)
    filled.append(core.fill(str(small_disk)))
    for taken in small_disk.parent.glob("merge.*.*"):
      taken.unlink()
  filler = threading.Thread(target=fill_when_merging, daemon=True)
  filler.start()
  with pytest.raises(tf.errors.ResourceExhaustedError):
    _save_as_rank_0(small_disk, 1, 8, resumed_at=4)
  filler.join()
  assert filled
  tables = small_disk / shard_checkpoints.DIRECTORY
  assert not (tables / "ckpt-8.index").exists()
  os.remove(filled[0])  # the fault ends; the job restarts
  assert shard_checkpoints.resume_where_tables_were_merged(
      str(small_disk)) == str(small_disk / "model.ckpt-8")
  assert tf.train.latest_checkpoint(str(small_disk)) == str(
      small_disk / "model.ckpt-4")
  # The step saved anew merges whole.
  monkeypatch.delenv(environment.LISTENER)
  _save_as_rank_0(small_disk, 1, 8, resumed_at=4)
  merged = tf.train.load_checkpoint(str(tables / "ckpt-8"))
  np.testing.assert_array_equal(merged.get_tensor("model/table"), ROWS)

"""Data the zoo generates is written once, atomically, and a data directory
that cannot be written sends it to the temp dir instead of failing.

Under `bazel test` (tools/bazel_test.sh) the data directory is the user's
cache, which the sandbox mounts read-only: there the first test checks the
real thing, which is why CI runs this target under Bazel.
"""
import errno
import glob
import multiprocessing
import os
import tempfile
import time

import pytest

from model_zoo import digits_data
from model_zoo import generated_data


def _writer(calls):
  def write(folder):
    calls.append(folder)
    with open(os.path.join(folder, "part-0"), "w", encoding="utf-8") as f:
      f.write("rows")
  return write


def test_the_digits_are_readable_whatever_the_data_directory():
  pattern = digits_data.tfrecord_pattern("train")
  assert len(glob.glob(pattern)) == digits_data.NUM_SHARDS
  data_dir = generated_data.default_data_dir()
  if os.environ.get("TEST_SRCDIR") and not os.access(data_dir, os.W_OK):
    # Bazel's sandbox: the user's cache is read-only, the test's tmp is not.
    assert pattern.startswith(tempfile.gettempdir() + os.sep)


def test_a_folder_is_written_once(tmp_path):
  calls = []
  first = generated_data.folder("rows-v1", _writer(calls), str(tmp_path))
  again = generated_data.folder("rows-v1", _writer(calls), str(tmp_path))
  assert first == again == str(tmp_path / "rows-v1")
  assert len(calls) == 1 and not os.path.exists(calls[0])  # renamed
  assert os.listdir(tmp_path) == ["rows-v1"]


@pytest.fixture
def read_only(tmp_path, monkeypatch):
  """A data directory whose writes fail as on a read-only mount (root
  ignores file modes, so the failure is made, not asked of chmod)."""
  root = tmp_path / "read_only"
  root.mkdir()
  real_mkdtemp = tempfile.mkdtemp

  def mkdtemp(prefix=None, dir=None):  # pylint: disable=redefined-builtin
    if dir and os.path.abspath(dir).startswith(str(root)):
      raise OSError(errno.EROFS, "Read-only file system", dir)
    return real_mkdtemp(prefix=prefix, dir=dir)

  monkeypatch.setattr(generated_data.tempfile, "mkdtemp", mkdtemp)
  monkeypatch.setattr(generated_data.tempfile, "tempdir",
                      str(tmp_path / "tmp"))
  (tmp_path / "tmp").mkdir()
  monkeypatch.setenv("ESTIMATOR_SCALE_DATA", str(root))
  return root


def test_a_read_only_data_directory_sends_the_data_to_the_temp_dir(
    read_only, tmp_path):
  calls = []
  path = generated_data.folder("rows-v1", _writer(calls))
  assert path == str(tmp_path / "tmp" / "estimator_scale_data" / "rows-v1")
  assert os.listdir(path) == ["part-0"]
  assert os.listdir(read_only) == []


def test_data_already_in_a_read_only_directory_is_read_there(read_only):
  (read_only / "rows-v1").mkdir()
  calls = []
  assert generated_data.folder("rows-v1", _writer(calls)) == str(
      read_only / "rows-v1")
  assert calls == []


def test_processes_asking_at_once_write_the_data_once(tmp_path):
  # Spawned, as the studies' pools and launched workers are, and let go
  # together.
  context = multiprocessing.get_context("spawn")
  ready = context.Barrier(3)
  workers = [context.Process(target=_slow_folder, args=(str(tmp_path), ready))
             for _ in range(3)]
  for worker in workers:
    worker.start()
  for worker in workers:
    worker.join(60)
  assert [w.exitcode for w in workers] == [0, 0, 0]
  assert sorted(os.listdir(tmp_path)) == ["rows-v1", "writes"]
  assert len(os.listdir(tmp_path / "writes")) == 1


def _slow_folder(root, ready):
  """generated_data.folder, once every process is ready, whose write takes
  a second and leaves a mark."""

  def write(folder):
    os.makedirs(os.path.join(root, "writes"), exist_ok=True)
    with open(os.path.join(root, "writes", str(os.getpid())), "w"):
      pass
    time.sleep(1.0)
    with open(os.path.join(folder, "part-0"), "w") as f:
      f.write("rows")
  ready.wait(30)
  assert generated_data.folder("rows-v1", write, root) == os.path.join(
      root, "rows-v1")


def test_other_failures_are_not_hidden(tmp_path):
  def write(folder):
    raise OSError(errno.ENOSPC, "No space left on device", folder)

  with pytest.raises(OSError, match="No space left"):
    generated_data.folder("rows-v1", write, str(tmp_path))
  assert os.listdir(tmp_path) == []

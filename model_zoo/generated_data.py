"""Where data the zoo generates itself (digits, clicks) is written once.

Such data is the same bytes wherever it is written, so a data directory that
cannot be written (a shared read-only copy, or Bazel's sandbox, which mounts
the user's cache read-only) is no reason to fail: the data is written under
the temp dir instead (under Bazel, the test's own).
"""
import contextlib
import errno
import fcntl
import os
import shutil
import tempfile

from absl import logging

from estimator_scale import environment

_READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)


def default_data_dir():
  """`environment.DATA`, else `estimator_scale_data` in the temp dir."""
  return os.environ.get(environment.DATA) or _temp_data_dir()


def _temp_data_dir():
  return os.path.join(tempfile.gettempdir(), "estimator_scale_data")


def folder(name, write, data_dir=None):
  """The folder `name` of the data directory, written by `write` if missing.

  Several processes may ask at once (Horovod ranks, TF_CONFIG workers): one
  writes into a private folder and renames it into place, so no reader
  sees a half-written one, while the others wait on a lock file.

  Args:
    name: the folder's name, with the data's version.
    write: called with an empty folder to write the data into.
    data_dir: where the data lives (default `default_data_dir()`); when it
      lacks the folder and cannot be written, the temp dir's is used.

  Returns:
    The folder's path.
  """
  root = data_dir or default_data_dir()
  try:
    return _write_once(os.path.join(root, name), write)
  except OSError as e:
    fallback = _temp_data_dir()
    if e.errno not in _READ_ONLY or os.path.abspath(root) == fallback:
      raise
    logging.info("%s cannot be written (%s): writing %s under %s", root,
                 e.strerror, name, fallback)
    return _write_once(os.path.join(fallback, name), write)


def _write_once(path, write):
  if os.path.isdir(path):
    return path
  os.makedirs(os.path.dirname(path), exist_ok=True)
  # The others wait for the first writer rather than write it too (minutes
  # of a core each for the large click logs); the rename below still keeps
  # readers safe where a file system has no locks.
  lock_path = path + ".lock"
  with open(lock_path, "a") as lock:
    with contextlib.suppress(OSError):  # no locks there: the rename alone
      fcntl.flock(lock, fcntl.LOCK_EX)
    try:
      return _write_unlocked(path, write)
    finally:  # a late comer finds the folder, or makes a lock of its own
      with contextlib.suppress(FileNotFoundError):
        os.remove(lock_path)


def _write_unlocked(path, write):
  if os.path.isdir(path):
    return path
  parent = os.path.dirname(path)
  scratch = tempfile.mkdtemp(prefix=os.path.basename(path) + "-", dir=parent)
  try:
    write(scratch)
    os.rename(scratch, path)
  except OSError:
    if not os.path.isdir(path):  # not another process that got there first
      raise
  finally:
    shutil.rmtree(scratch, ignore_errors=True)
  return path

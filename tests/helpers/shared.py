"""A reference job run once per pytest session, whatever the xdist workers.

A module fixture runs once in each xdist worker that runs a test of its
module; with --maxschedchunk=1 the tests of one module spread over all the
workers, so a one-process reference several tests compare against would
train once per worker. `once` trains it in the first worker that asks,
under a file lock in the directory all the session's workers make their
temporary directories in; the others wait for it and read what it wrote.
"""
import fcntl
import os
import shutil


def _session_root(tmp_path_factory):
  """The directory every worker of this session shares."""
  root = tmp_path_factory.getbasetemp()
  if os.environ.get("PYTEST_XDIST_WORKER"):
    return root.parent  # pytest-N, above each worker's popen-gwK
  return root


def once(tmp_path_factory, key, compute):
  """The directory where `compute(directory)` wrote its results, once per
  session for `key` (name in it every argument the results depend on).

  A compute that raises marks nothing done: the next test that asks starts
  again in an emptied directory (and fails alike, with its own error).
  """
  root = _session_root(tmp_path_factory)
  directory, done = root / f"once-{key}", root / f"once-{key}.done"
  with open(root / f"once-{key}.lock", "w", encoding="utf-8") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not done.exists():
      shutil.rmtree(directory, ignore_errors=True)
      directory.mkdir()
      compute(directory)
      done.touch()
  return directory


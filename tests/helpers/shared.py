"""A reference job run once per pytest session, whatever the xdist workers.

A module fixture runs once in each xdist worker that runs a test of its
module; with --maxschedchunk=1 the tests of one module spread over all the
workers, so a one-process reference several tests compare against would
train once per worker. `once` trains it in the first worker that asks,
under a file lock in the directory all the session's workers make their
temporary directories in; the others wait for it and read what it wrote.
A test that also runs a job of its own asks after that job, so that its
worker trains while another trains the reference.
"""
import fcntl
import json
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
  return once_all(tmp_path_factory, {key: compute})[key]


def once_all(tmp_path_factory, computes):
  """{key: its directory} of `once` for every key of `computes`.

  A key that another worker is computing is left until the others are
  done, so that workers asking for the same set compute different parts of
  it side by side instead of waiting in turn.
  """
  root = _session_root(tmp_path_factory)
  pending = list(computes)
  for wait in (False, True):
    pending = [key for key in pending
               if not _compute_once(root, key, computes[key], wait)]
  return {key: root / f"once-{key}" for key in computes}


def _compute_once(root, key, compute, wait):
  """Whether `key` is done, computing it first if needed; False only when
  another worker holds it and `wait` is False."""
  directory, done = root / f"once-{key}", root / f"once-{key}.done"
  with open(root / f"once-{key}.lock", "w", encoding="utf-8") as lock:
    try:
      fcntl.flock(lock, fcntl.LOCK_EX if wait else
                  fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      return False
    if not done.exists():
      shutil.rmtree(directory, ignore_errors=True)
      directory.mkdir()
      compute(directory)
      done.touch()
  return True


def runs_once(tmp_path_factory, name, start, jobs, **flags):
  """(mode, i) -> the out directory of the i-th run of the `mode` job of
  `jobs` ({mode: (its runs, its own flags)}).

  `start(mode, out, model_dir, **flags)` starts a tests.workers.dump_run
  job of `mode`; each job trains all its runs (dump_run's --runs), once
  per session (`once_all`, keyed by `name` and the mode): the first test to
  ask for one run gets every job done. Cases that differ only in their
  flags then pay for one job start (and rendezvous) per backend instead of
  one per case.
  """
  def job(mode):
    runs, extra = jobs[mode]
    return lambda root: start(mode, root / "out", root / "model",
                              runs=json.dumps(runs), **extra, **flags)

  def out(mode, i):
    roots = once_all(tmp_path_factory,
                     {f"{name}-{m}": job(m) for m in jobs})
    return roots[f"{name}-{mode}"] / "out" / str(i)
  return out


def micro_batch_runs(tmp_path_factory, name, start, cases, k=4, **flags):
  """(mode, i) -> the out directory of `cases[i]` ({flag: value}) trained
  with each global batch in one piece on one process ("large") or in k
  micro-batches on `mode` (mirrored, horovod, multi_worker_mirrored).

  One job per backend trains every case (`runs_once`); the one-process
  runs share one process, the mirrored ones first (dump_run's --runs).
  """
  mirrored = [dict(run, distribution="mirrored", accumulation_steps=k)
              for run in cases]
  out = runs_once(tmp_path_factory, name, start,
                  {"none": (mirrored + cases, {}),
                   "horovod": (cases, {"accumulation_steps": k}),
                   "multi_worker_mirrored": (cases,
                                             {"accumulation_steps": k})},
                  **flags)

  def case(mode, i):
    if mode == "large":
      return out("none", len(cases) + i)
    return out("none" if mode == "mirrored" else mode, i)
  return case

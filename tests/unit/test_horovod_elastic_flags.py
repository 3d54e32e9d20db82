"""Elastic Horovod's flags and batch policy, without horovodrun.

The job itself (hosts joining and dying) is tests/multihost/
test_horovod_elastic.py; here: what is refused in one line, and the batch
each size gets.
"""
import subprocess
import sys

import pytest
import tensorflow as tf

from estimator_scale import backends
from estimator_scale import errors
from estimator_scale.backends.horovod import elastic
from estimator_scale.backends.horovod import faults
from tests.helpers.processes import PYTHON, ROOT, run, worker_env

START = elastic.Batch(global_batch_size=128, accumulation_steps=2)


def _cli(*flags, env=None):
  return run([PYTHON, "-m", "estimator_scale.cli", *flags], check=False,
             env=env, timeout=120)


def _error_line(proc):
  lines = proc.stderr.strip().splitlines()
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert lines[-1].startswith("estimator-scale: error: "), proc.stderr[-3000:]
  return lines[-1]


@pytest.mark.parametrize("flag", ["--elastic_batch=hold",
                                  "--commit_every_n_steps=10"])
def test_elastic_flags_outside_an_elastic_job_are_refused(flag):
  line = _error_line(_cli(flag, "--train_steps=1"))
  assert line == (
      f"estimator-scale: error: --{flag[2:].split('=')[0]} applies to "
      "elastic Horovod jobs only: horovodrun --min-np N --max-np M "
      "--host-discovery-script SCRIPT python -m estimator_scale.cli "
      "--distribution=horovod ...")


@pytest.mark.parametrize("flag, says", [
    ("--elastic_batch=keep", "value should be one of <scale|hold>"),
    ("--commit_every_n_steps=0", "0 is not a positive integer"),
])
def test_bad_elastic_flag_values_are_one_line(flag, says):
  line = _error_line(_cli(flag))
  assert says in line and flag.split("=")[0][2:] in line, line


def test_save_checkpoints_steps_is_refused_in_an_elastic_job():
  # Refused before Horovod starts, so no horovodrun is needed.
  env = dict(worker_env(), HOROVOD_ELASTIC="1")
  line = _error_line(_cli("--distribution=horovod",
                          "--save_checkpoints_steps=50", env=env))
  assert "--save_checkpoints_steps does not apply to an elastic Horovod " \
         "job" in line and "--commit_every_n_steps" in line


def test_scale_keeps_each_ranks_batch_so_the_global_batch_follows():
  assert elastic.batch_for_size("scale", 32, START, 3) == elastic.Batch(192, 2)
  assert elastic.batch_for_size("scale", 32, START, 1) == elastic.Batch(64, 2)


def test_hold_keeps_the_global_batch_by_changing_accumulation():
  assert elastic.batch_for_size("hold", 32, START, 4) == elastic.Batch(128, 1)
  assert elastic.batch_for_size("hold", 32, START, 1) == elastic.Batch(128, 4)
  with pytest.raises(errors.ConfigError) as raised:
    elastic.batch_for_size("hold", 32, START, 3)
  assert str(raised.value) == (
      "elastic_batch='hold' cannot keep global_batch_size=128 on 3 ranks: "
      "an update is 4 micro-batches of 32 examples, which 3 ranks cannot "
      "share evenly (sizes that can: 1, 2, 4); use elastic_batch='scale' to "
      "let the global batch follow the size")


@pytest.mark.parametrize("arguments, says", [
    (("keep", 10), "elastic_batch='keep' is not a policy; valid: scale, hold"),
    (("scale", 0), "commit_every_n_steps=0 must be an integer >= 1"),
])
def test_bad_arguments_are_refused(arguments, says):
  with pytest.raises(errors.ConfigError) as raised:
    elastic.check_arguments(*arguments)
  assert str(raised.value).startswith(says)


class _OneRankOfTwo:
  """What an attempt asks of horovod.tensorflow and of its ObjectState."""
  micro_batch = None

  def size(self):
    return 2

  def rank(self):
    return 1

  def save(self):
    pass

  def commit(self):
    pass


def test_a_horovod_backend_made_in_an_attempt_holds_that_job():
  job = elastic._Job(_OneRankOfTwo(), _OneRankOfTwo(), START, "scale", 10)  # pylint: disable=protected-access
  made = job.attempt(_OneRankOfTwo(), lambda batch: backends.get("horovod"))
  assert made.elastic_job is job
  assert backends.get("horovod").elastic_job is None  # the attempt ended


def test_an_elastic_run_outside_horovodruns_elastic_driver_is_refused(
    monkeypatch):
  monkeypatch.delenv("HOROVOD_ELASTIC", raising=False)
  with pytest.raises(errors.TopologyError) as raised:
    elastic.run(lambda batch: None, 128)
  assert "horovodrun --min-np N --max-np M --host-discovery-script" in str(
      raised.value)


ORPHAN = """
import time
from estimator_scale.backends.horovod import faults
assert faults.watch_launcher(grace_seconds=30)
print("watching", flush=True)
time.sleep(60)
"""


def test_an_elastic_rank_whose_launcher_is_gone_leaves_at_once():
  # No SIGTERM: that would stop every rank after the same update and end
  # the job the others carry on.
  rank = subprocess.Popen([sys.executable, "-c", ORPHAN], cwd=ROOT,
                          env=dict(worker_env(), HOROVOD_ELASTIC="1"),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  assert rank.stdout.readline() == b"watching\n", rank.stderr.read()
  rank.stdout.close()
  rank.stderr.close()
  assert rank.wait(timeout=20) == faults.EXIT_LAUNCHER_GONE


def test_a_rank_too_late_for_its_round_asks_for_its_slot_again(monkeypatch):
  exceptions = pytest.importorskip("horovod.common.exceptions")
  calls = []

  def init_horovod(error):
    calls.append("init")
    raise error

  monkeypatch.setattr(elastic.ranks, "import_horovod", lambda: "hvd")
  monkeypatch.setattr(elastic, "_rejoin",
                      lambda hvd, environ=None: calls.append(("rejoin", hvd)))
  monkeypatch.setattr(elastic.ranks, "init_horovod", lambda: init_horovod(
      exceptions.HorovodInitError("the round's other ranks gave up")))
  assert elastic._join() == "hvd"  # pylint: disable=protected-access
  assert calls == ["init", ("rejoin", "hvd")]
  # Any other failure is not a late start: the rank leaves with it.
  monkeypatch.setattr(elastic.ranks, "init_horovod",
                      lambda: init_horovod(ValueError("bad flag")))
  with pytest.raises(ValueError, match="bad flag"):
    elastic._join()  # pylint: disable=protected-access


def test_a_save_that_finds_the_disk_full_sends_the_ranks_back(monkeypatch):
  # With tables sharded over the ranks every rank saves: each whose save
  # found the disk full goes back to the last commit (Horovod's internal
  # error) after a doubling wait, until FULL_DISK_ATTEMPTS in a row.
  exceptions = pytest.importorskip("horovod.common.exceptions")
  waits = []
  monkeypatch.setattr(elastic.time, "sleep", waits.append)
  job = elastic._Job(_OneRankOfTwo(), _OneRankOfTwo(), START, "scale", 10)  # pylint: disable=protected-access
  full = tf.errors.ResourceExhaustedError(
      None, None, "/model/sharded_tables/ckpt-1020-of3-rank2-part0.data; No "
      "space left on device")

  def save(batch):
    raise full
  for _ in range(elastic.FULL_DISK_ATTEMPTS):
    with pytest.raises(exceptions.HorovodInternalError):
      job.attempt(_OneRankOfTwo(), save)
  assert waits == [5, 10, 20, 40, 60]
  with pytest.raises(tf.errors.ResourceExhaustedError):
    job.attempt(_OneRankOfTwo(), save)
  # A commit starts the count again; other errors are the rank's own.
  monkeypatch.setattr(job, "_broadcast", lambda value: value)
  job.commit(1030)
  with pytest.raises(exceptions.HorovodInternalError):
    job.attempt(_OneRankOfTwo(), save)
  denied = tf.errors.PermissionDeniedError(None, None, "/model: denied")
  with pytest.raises(tf.errors.PermissionDeniedError):
    job.attempt(_OneRankOfTwo(), lambda batch: (_ for _ in ()).throw(denied))
  assert faults.disk_full(OSError(28, "No space left on device")) == (
      "[Errno 28] No space left on device")
  assert faults.disk_full(full).startswith("/model/sharded_tables/ckpt-1020")

"""The studies' pool of training processes (tools/study/pool.py)."""
import multiprocessing
import time

import pytest

from tools.study import __main__ as digits_study
from tools.study import batch_specs
from tools.study import click
from tools.study import specs


def test_a_failed_run_names_itself_with_its_traceback(tmp_path, capfd):
  # A TensorFlow error raised in a pool process holds graph objects the
  # pool cannot send back: the caller saw "cannot pickle 'Operation'" and
  # lost the runs beside it. The run's own error must come back instead.
  spec = dict(batch_specs.run_spec("adagrad", "AS", 8), model="no_such_model")
  log = tmp_path / "runs.jsonl"
  with pytest.raises(SystemExit, match=r"1 of 1 runs failed \(no_such_model "
                     r"adagrad AS S=8\)"):
    click.run_all([spec], 1, str(log), time.time(), batch_specs.priority)
  err = capfd.readouterr().err
  assert "model='no_such_model' is not a registered model" in err
  assert "Traceback" in err
  assert not log.exists()


def test_a_failed_digits_run_ends_the_study_with_its_traceback():
  # The digits tables need every run, so the first failure ends the study,
  # naming the run and keeping its own error.
  args = digits_study.parse_args(["--tasks", "digits_mlp", "--seeds", "1"])
  settings = dict(specs.task_settings(args, "digits_mlp", 1),
                  model="no_such_model")
  [spec] = specs.run_specs(settings, "AS", (4,))
  pool = multiprocessing.get_context("spawn").Pool(1)
  try:
    with pytest.raises(SystemExit, match=r"(?s)^no_such_model AS S=\(4,\) "
                       r"seed=0 failed:\nTraceback.*model='no_such_model' is "
                       r"not a registered model"):
      digits_study._run_all([spec], pool)
  finally:
    pool.terminate()

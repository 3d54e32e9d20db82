"""The studies' pool of training processes (tools/study/click.py)."""
import time

import pytest

from tools.study import batch_specs
from tools.study import click


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

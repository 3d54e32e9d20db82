"""Resuming with another recipe from the command line, on one process."""
import re

import pytest

from tests.helpers.checkpoints import FRESH_LINE, checkpoint_values
from tests.helpers.processes import CLI, RESUME_ADASCALE, run


def _cli(model_dir, *flags, check=True):
  return run(CLI + ["--model=digits_mlp", f"--model_dir={model_dir}", *flags],
             check=check)


@pytest.mark.parametrize("backend,scale", [
    (["--distribution=none"], 2),
    (["--distribution=mirrored", "--replicas=2"], 4)], ids=["none", "mirrored"])
def test_cli_resume_of_a_momentum_run_with_adascale_and_accumulation(
    tmp_path, backend, scale):
  model_dir = tmp_path / "model"
  _cli(model_dir, "--train_steps=20", "--save_checkpoints_steps=10", *backend)
  proc = _cli(model_dir, "--train_steps=40", *RESUME_ADASCALE, *backend)
  lines = [l for l in proc.stderr.splitlines() if FRESH_LINE in l]
  assert len(lines) == 1, proc.stderr[-3000:]
  assert "adascale/ema_weight" in lines[0] and "model.ckpt-20" in lines[0]
  assert "Traceback" not in proc.stderr
  saved = checkpoint_values(model_dir)
  assert saved["global_step"] == 40 and saved["adascale/scale"] == scale
  assert saved["adascale/progress"] >= 20


def test_cli_resume_with_another_network_exits_2_in_one_line(tmp_path):
  model_dir = tmp_path / "model"
  _cli(model_dir, "--train_steps=10")
  proc = _cli(model_dir, "--train_steps=20", "--hparams=hidden_units=128:32",
              check=False)
  assert proc.returncode == 2, proc.stderr[-3000:]
  # Besides absl's INFO lines (where the input resumes), one line says why.
  said = [l for l in proc.stderr.splitlines() if not re.match(r"I\d{4} ", l)]
  assert said == [
      "estimator-scale: error: cannot resume: variable model/hidden1/bias has "
      f"shape [64] in checkpoint {model_dir}/model.ckpt-10 but [32] in this "
      "model (5 more variable(s) differ too); resume with the model and "
      "hparams the checkpoint was trained with, or train in a new "
      "model_dir"], proc.stderr

"""A recipe change on resume under the multi-process backends, from the CLI.

Every Horovod rank and every multi_worker_mirrored worker restores its own
session, and a parameter-server job's chief restores for all, so each
backend must restore the same variables, start the same state fresh, and
print the line naming it once (the chief's).
"""
import pytest

from tests.helpers.checkpoints import FRESH_LINE, checkpoint_values
from tests.helpers.processes import (RESUME_ADASCALE, horovodrun_argv,
                                     launch_argv, run)

TRAIN = ["-m", "estimator_scale.cli", "--model=digits_mlp"]


def _argv(backend, model_dir, flags):
  train = TRAIN + [f"--distribution={backend}", f"--model_dir={model_dir}"]
  if backend == "horovod":
    return horovodrun_argv(2, train + flags)
  if backend == "parameter_server":
    return launch_argv(1, train + flags, ps=1)
  return launch_argv(2, train + flags)


@pytest.mark.parametrize("backend", ["horovod", "multi_worker_mirrored",
                                     "parameter_server"])
def test_cli_resume_of_a_momentum_run_with_adascale_and_accumulation(
    backend, tmp_path):
  model_dir = tmp_path / "model"
  run(_argv(backend, model_dir, ["--train_steps=20",
                                 "--save_checkpoints_steps=10"]))
  proc = run(_argv(backend, model_dir, ["--train_steps=40"] + RESUME_ADASCALE))
  log = proc.stdout + proc.stderr
  lines = [l for l in log.splitlines() if FRESH_LINE in l]
  assert len(lines) == 1, log[-3000:]
  assert "adascale/ema_weight" in lines[0] and "model.ckpt-20" in lines[0]
  assert "Traceback" not in log
  saved = checkpoint_values(model_dir)
  assert saved["global_step"] == 40
  # Two workers x two micro-batches; a parameter-server worker's update
  # averages only its own micro-batches.
  assert saved["adascale/scale"] == (2 if backend == "parameter_server" else 4)
  assert saved["adascale/progress"] >= 20


def test_another_network_stops_every_horovod_rank_in_one_line(tmp_path):
  model_dir = tmp_path / "model"
  run(horovodrun_argv(2, TRAIN + ["--distribution=horovod",
                                  f"--model_dir={model_dir}",
                                  "--train_steps=10"]))
  proc = run(horovodrun_argv(2, TRAIN + [
      "--distribution=horovod", f"--model_dir={model_dir}",
      "--train_steps=20", "--hparams=hidden_units=128:32"]), check=False)
  log = proc.stdout + proc.stderr
  assert proc.returncode != 0
  rank_lines = [l for l in log.splitlines() if l.startswith("[0]")]
  errors = [l for l in rank_lines if "error: cannot resume" in l]
  assert len(errors) == 1 and "model/hidden1/bias" in errors[0], log[-3000:]
  # horovodrun prints its own traceback; the ranks print none.
  assert not [l for l in log.splitlines()
              if l.startswith(("[0]", "[1]")) and "Traceback" in l]

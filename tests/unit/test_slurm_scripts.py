"""The batch scripts of tools/deploy/slurm run under bash with a fake srun.

What a script does after a failed step (run it again, or give up and wait
for Slurm's requeue) is its own logic, untested by the rig's Slurm runs
unless a fault lands; here srun follows a plan, one line per call: its
exit code and, optionally, the checkpoint the step leaves.
"""
import os
import stat
import subprocess

import pytest

from tests.helpers.processes import ROOT

SCRIPTS = ("horovod", "multi_worker_mirrored", "parameter_server")

_SRUN = """#!/bin/bash
calls=$(($(cat "$FAKE/calls" 2>/dev/null || echo 0) + 1))
echo "$calls" > "$FAKE/calls"
read -r code checkpoint < <(sed -n "${calls}p" "$FAKE/plan")
if [ -n "$checkpoint" ]; then
  echo "model_checkpoint_path: \\"$checkpoint\\"" > "$MODEL_DIR/checkpoint"
fi
exit "${code:-99}"
"""

_SCONTROL = """#!/bin/bash
echo "SlurmdTimeout           = 5 sec"
"""

_SLEEP = """#!/bin/bash
echo "$1" >> "$FAKE/sleeps"
"""


def _run(tmp_path, script, plan, **env):
  """(exit code, srun calls, sleeps, stderr) of `script` under `plan`."""
  fake = tmp_path / "fake"
  fake.mkdir(parents=True)
  for name, text in (("srun", _SRUN), ("scontrol", _SCONTROL),
                     ("sleep", _SLEEP)):
    (fake / name).write_text(text)
    (fake / name).chmod(stat.S_IRWXU)
  (fake / "plan").write_text("".join(f"{line}\n" for line in plan))
  (tmp_path / "model").mkdir()
  proc = subprocess.run(
      ["bash", os.path.join(ROOT, "tools/deploy/slurm", f"{script}.sbatch"),
       "--model=digits_cnn"],
      env={"PATH": f"{fake}:/usr/bin:/bin", "FAKE": str(fake),
           "MODEL_DIR": str(tmp_path / "model"), **env},
      capture_output=True, text=True, timeout=60, check=False)
  calls = int((fake / "calls").read_text()) if (fake / "calls").exists() else 0
  sleeps = ((fake / "sleeps").read_text().split()
            if (fake / "sleeps").exists() else [])
  return proc.returncode, calls, sleeps, proc.stderr


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_step_that_ends_well_ends_the_job(tmp_path, script):
  assert _run(tmp_path, script, ["0"])[:3] == (0, 1, [])


@pytest.mark.parametrize("script", SCRIPTS)
def test_failures_without_a_checkpoint_give_up_then_wait_for_the_requeue(
    tmp_path, script):
  # 3 attempts 5 then 10 s apart, then twice SlurmdTimeout and 10 s.
  assert _run(tmp_path, script, ["1", "1", "1", "0"])[:3] == (
      1, 3, ["5", "10", "20"])


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_step_that_trained_on_starts_a_new_run_of_attempts(tmp_path,
                                                             script):
  # With 2 attempts, never two failures in a row without a checkpoint.
  plan = ["137 model.ckpt-10", "1 model.ckpt-20", "1", "1 model.ckpt-30",
          "1", "0"]
  code, calls, _, _ = _run(tmp_path, script, plan, STEP_ATTEMPTS="2")
  assert (code, calls) == (0, 6)
  # Two in a row end it.
  plan = ["1 model.ckpt-10", "1", "1", "0"]
  assert _run(tmp_path / "again", script, plan, STEP_ATTEMPTS="2")[:2] == (
      1, 3)


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_retry_that_succeeds_ends_the_job(tmp_path, script):
  assert _run(tmp_path, script, ["1", "143", "0"])[:3] == (0, 3,
                                                           ["5", "10"])


def test_the_wait_doubles_up_to_five_minutes(tmp_path):
  plan = ["1"] * 9 + ["0"]
  assert _run(tmp_path, "horovod", plan, STEP_ATTEMPTS="20")[2] == [
      "5", "10", "20", "40", "80", "160", "300", "300", "300"]


@pytest.mark.parametrize("attempts", ["three", "0", "-1", "2.5"])
def test_a_bad_step_attempts_is_refused_naming_it(tmp_path, attempts):
  code, calls, _, stderr = _run(tmp_path, "horovod", ["0"],
                                STEP_ATTEMPTS=attempts)
  assert (code, calls) == (2, 0)
  assert stderr.strip() == (f"STEP_ATTEMPTS={attempts}: give a whole "
                            "number, 1 or more")

"""estimator-scale-launch --max_restarts on this machine: when it restarts.

The tasks here are small Python scripts, not training: what is under test
is the launcher's decision after a failure (restart, give up, refuse) and
the one line it writes for it. Restarts on hosts, with real training, are
tests/multihost/test_elastic_launch.py.
"""
import sys

from tests.helpers.checkpoints import write_checkpoint_state
from tests.helpers.processes import PYTHON, run

LAUNCH = [PYTHON, "-m", "estimator_scale.launcher"]

# Worker 1 fails the first time the job runs (no marker yet), then succeeds.
FAILS_ONCE = """
import json, os, sys
task = json.loads(os.environ["TF_CONFIG"])["task"]
marker = os.path.join(sys.argv[1], "failed_once")
if task["index"] == 1 and not os.path.exists(marker):
    open(marker, "w").close()
    sys.exit(int(sys.argv[2]))
print("ran", task["index"], len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"]))
"""


def _launch(tmp_path, code, *flags):
  return run(LAUNCH + ["--workers", "2"] + list(flags) +
             ["--model_dir", str(tmp_path / "model"), "--", sys.executable,
              "-c", FAILS_ONCE, str(tmp_path), str(code)], check=False,
             timeout=60)


def _launch_lines(proc):
  return [l for l in proc.stdout.splitlines() if l.startswith("[launch]")]


def test_a_failed_task_restarts_the_job_from_the_last_checkpoint(tmp_path):
  write_checkpoint_state(tmp_path / "model", 150)
  proc = _launch(tmp_path, 1, "--max_restarts", "2")
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert _launch_lines(proc) == [
      "[launch] worker:1 exited with 1; restart 1 of 2: 2 -> 2 workers, "
      "resuming at step 150"]
  assert "[worker:0] ran 0 2" in proc.stdout
  assert "[worker:1] ran 1 2" in proc.stdout


def test_without_restarts_left_the_job_ends(tmp_path):
  proc = run(LAUNCH + ["--workers", "2", "--max_restarts", "1", "--",
                       sys.executable, "-c", "import sys; sys.exit(3)"],
             check=False, timeout=60)
  assert proc.returncode == 3
  lines = _launch_lines(proc)
  assert len(lines) == 2, proc.stdout
  assert lines[0].endswith("restart 1 of 1: 2 -> 2 workers, resuming from "
                           "the latest checkpoint")
  assert lines[1].endswith("exited with 3; no restart left (--max_restarts "
                           "1); stopping every task")


def test_a_configuration_error_is_not_restarted(tmp_path):
  proc = _launch(tmp_path, 2, "--max_restarts", "3")
  assert proc.returncode == 2
  assert _launch_lines(proc) == [
      "[launch] worker:1 exited with 2 (a configuration error: a restart "
      "would fail alike); stopping every task"]


def test_launcher_flags_are_checked(tmp_path):
  for flags, message in (
      (["--max_restarts", "0"], "--max_restarts must be >= 1"),
      (["--max_restarts", "1", "--min_workers", "3"],
       "--min_workers 3 is more than the job's 2 training task(s)")):
    proc = run(LAUNCH + ["--workers", "2"] + flags + ["--", "true"],
               check=False, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr

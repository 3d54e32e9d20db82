"""What the launcher reads of a job: its model_dir and latest checkpoint step.

Its restarts, with real tasks, are tests/integration/test_launch_elastic.py.
"""
from estimator_scale.launcher import elastic
from tests.helpers.checkpoints import write_checkpoint_state


def test_checkpoint_step_and_model_dir_of(tmp_path):
  assert elastic.checkpoint_step(str(tmp_path)) == 0
  write_checkpoint_state(tmp_path, 42)
  assert elastic.checkpoint_step(str(tmp_path)) == 42
  assert elastic.checkpoint_step("gs://bucket/run") is None
  assert elastic.checkpoint_step(None) is None
  assert elastic.model_dir_of(
      ["python", "-m", "x", "--model_dir=/a/b"]) == "/a/b"
  assert elastic.model_dir_of(["x", "--model_dir", "/c"]) == "/c"
  assert elastic.model_dir_of(["x"]) is None

"""The chief's metrics, as a parameter-server job's other workers take them:
all of them, at the checkpoint's step, or a clear timeout."""
import numpy as np
import pytest

from estimator_scale.backends import tf_config


def test_workers_read_what_the_chief_wrote_for_the_checkpoints_step(tmp_path):
  eval_dir = str(tmp_path / "eval")
  # A worker stepped between the chief naming the checkpoint and saving it:
  # the metrics' global_step is one past the name, which workers look up.
  metrics = {"auc": np.float32(0.75), "global_step": np.int64(21),
             "loss": np.float32(0.5)}
  checkpoint = str(tmp_path / "model.ckpt-20")
  tf_config._write_metrics(eval_dir, checkpoint, metrics)
  read = tf_config._read_metrics(eval_dir, checkpoint)
  assert read == {"auc": 0.75, "global_step": 21, "loss": 0.5}
  assert sorted(p.name for p in (tmp_path / "eval").iterdir()) == [
      "metrics-20.json"]  # nothing left aside


def test_a_worker_without_the_chiefs_metrics_stops_naming_the_file(tmp_path):
  tf_config._write_metrics(str(tmp_path), "/m/model.ckpt-10",
                           {"global_step": np.int64(10)})
  with pytest.raises(TimeoutError, match=r"no metrics of step 20 from the "
                     r"chief in .*metrics-20\.json after 0s"):
    tf_config._read_metrics(str(tmp_path), "/m/model.ckpt-20", wait_s=0)

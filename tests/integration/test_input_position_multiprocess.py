"""Every example once per epoch across restarts, from real worker processes.

A job of 96 examples (global batch 8: an epoch is 12 updates) is stopped
and restarted twice within the epoch, then once more with another number of
workers; the ids every worker trained on, over every run, must be each
example exactly once per epoch. The Horovod job reads 12 TFRecord files
sharded by file (its change of worker count deals the rest of each rank's
files over the new workers); the others read arrays.
"""
import pytest

from tests.helpers.processes import PYTHON, horovod, launch, run
from tests.helpers.trained_ids import trained

_WORKER = ["-m", "tests.workers.position_run"]


def _train(backend, workers, model_dir, out, run_name, max_steps,
           tfrecords=None):
  args = _WORKER + [f"--distribution={backend}", f"--model_dir={model_dir}",
                    f"--out_dir={out}", f"--run={run_name}",
                    f"--max_steps={max_steps}"]
  if tfrecords:
    args.append(f"--tfrecords={tfrecords}")
  if backend == "horovod":
    return horovod(workers, args)
  if backend == "multi_worker_mirrored":
    return launch(workers, args)
  return run([PYTHON] + args)


@pytest.mark.parametrize("backend,workers,then", [
    ("none", 1, ("horovod", 2)), ("horovod", 2, ("none", 1)),
    ("multi_worker_mirrored", 2, ("none", 1))])
def test_two_restarts_in_an_epoch_then_another_worker_count(
    backend, workers, then, tmp_path):
  model_dir, out = tmp_path / "model", tmp_path / "ids"
  data = tmp_path / "data" if backend == "horovod" else None
  for run_name, stop in (("a", 3), ("b", 7), ("c", 12)):
    _train(backend, workers, model_dir, out, run_name, stop, data)
  epoch = trained(out, "a") + trained(out, "b") + trained(out, "c")
  assert sorted(epoch) == list(range(96)), backend
  # The next epoch: half on `workers`, the rest on `then`'s.
  _train(backend, workers, model_dir, out, "d", 18, data)
  _train(*then, model_dir, out, "e", 24, data)
  assert sorted(trained(out, "d") + trained(out, "e")) == list(range(96))

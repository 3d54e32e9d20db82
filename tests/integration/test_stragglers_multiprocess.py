"""The chief names the slow worker: 2 real Horovod ranks, and 2 TF_CONFIG
workers of multi_worker_mirrored, one of them sleeping 50 ms per update."""
import re

import pytest

from tests.helpers import processes

LINE = re.compile(r"stragglers: compute per update, steps (\d+)-(\d+): (.*)")


def _straggler_lines(output):
  return [LINE.search(line).groups() for line in output.splitlines()
          if LINE.search(line)]


def _train(tmp_path, start, **kwargs):
  model_dir = tmp_path / "run"
  args = ["-m", "estimator_scale.cli", "--model_module=tests.workers.slow_worker",
          "--model=slow_digits_mlp", f"--model_dir={model_dir}",
          "--train_steps=60", "--log_every_n_steps=25", "--eval_steps=2"]
  env = dict(processes.worker_env(), SLOW_WORKER="1")
  proc = start(args, env=env, timeout=300, **kwargs)
  return _straggler_lines(proc.stdout + proc.stderr)


@pytest.mark.parametrize("distribution, slow, fast", [
    ("horovod", "rank 1 (localhost)", "rank 0 (localhost)"),
    ("multi_worker_mirrored", "worker 1 (localhost)",
     "worker 0 (localhost)"),
])
def test_slow_worker_named_every_n_updates_and_at_the_end(
    tmp_path, distribution, slow, fast):
  if distribution == "horovod":
    lines = _train(tmp_path, lambda args, **kw: processes.horovod(
        2, args + ["--distribution=horovod"], **kw))
  else:
    lines = _train(tmp_path, lambda args, **kw: processes.launch(
        2, args + ["--distribution=multi_worker_mirrored"], **kw))
  # Two windows of 25 updates after the first (warm-up), then the whole run.
  assert [(int(a), int(b)) for a, b, _ in lines] == [(2, 26), (27, 51),
                                                      (2, 60)], lines
  for _, _, text in lines:
    figures, _, named = text.partition("slow (above 1.25x the median): ")
    assert f"{slow} " in figures and f"{fast} " in figures, text
    assert named.startswith(slow) and fast not in named, text

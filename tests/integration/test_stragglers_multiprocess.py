"""The chief names the slow worker and why: 2 real Horovod ranks, one of
them computing 50 ms longer per update, and 2 TF_CONFIG workers of
multi_worker_mirrored, one of them parsing each batch 50 ms longer."""
import re

import pytest

from tests.helpers import processes

LINE = re.compile(r"stragglers: compute per update, steps (\d+)-(\d+): (.*)")
WAITS = re.compile(r"progress: step \d+, .*input wait per worker (\d+)% "
                   r"(\d+)%")


def _lines(output):
  """(straggler lines' (first, last, text), progress lines' input waits)."""
  lines = output.splitlines()
  return ([LINE.search(line).groups() for line in lines if LINE.search(line)],
          [[int(share) / 100 for share in WAITS.search(line).groups()]
           for line in lines if WAITS.search(line)])


def _train(tmp_path, start, slow_part, **kwargs):
  model_dir = tmp_path / "run"
  args = ["-m", "estimator_scale.cli", "--model_module=tests.workers.slow_worker",
          "--model=slow_digits_mlp", f"--model_dir={model_dir}",
          "--train_steps=60", "--log_every_n_steps=25", "--eval_steps=2"]
  env = dict(processes.worker_env(), SLOW_WORKER="1",
             SLOW_WORKER_PART=slow_part)
  proc = start(args, env=env, timeout=300, **kwargs)
  return _lines(proc.stdout + proc.stderr)


@pytest.mark.parametrize("distribution, slow_part, slow, fast", [
    ("horovod", "compute", "rank 1 (localhost)", "rank 0 (localhost)"),
    ("multi_worker_mirrored", "input", "worker 1 (localhost)",
     "worker 0 (localhost)"),
])
def test_slow_worker_named_every_n_updates_and_at_the_end(
    tmp_path, distribution, slow_part, slow, fast):
  if distribution == "horovod":
    lines, waits = _train(tmp_path, lambda args, **kw: processes.horovod(
        2, args + ["--distribution=horovod"], **kw), slow_part)
  else:
    lines, waits = _train(tmp_path, lambda args, **kw: processes.launch(
        2, args + ["--distribution=multi_worker_mirrored"], **kw), slow_part)
  # Two windows of 25 updates after the first (warm-up), then the whole run.
  assert [(int(a), int(b)) for a, b, _ in lines] == [(2, 26), (27, 51),
                                                      (2, 60)], lines
  why = ("slow because of its input" if slow_part == "input" else
         "(not its input")
  for _, _, text in lines:
    figures, _, named = text.partition("slow (above 1.25x the median): ")
    assert f"{slow} " in figures and f"{fast} " in figures, text
    assert named.startswith(slow) and fast not in named, text
    assert why in named, text
  # The chief's progress lines: each worker's input wait, in worker order.
  # The input reads the next batch while an update exchanges, so a 50 ms
  # parse holds each update up for less than 50 ms. A rank slow to compute
  # waits for its input about as little; on a loaded machine a window's
  # figure has reached 0.12 s, still far below the slow input's 0.25 s.
  assert len(waits) == 2, waits
  for fast_wait, slow_wait in waits:
    assert fast_wait <= 0.05, waits
    if slow_part == "input":
      assert slow_wait >= 0.25, waits
    else:
      assert slow_wait < 0.25, waits

"""Tables split over Horovod ranks are evaluated on the ranks, and the
metrics equal one process's on the same checkpoint and data; so do the
ranks' predictions, each rank its own examples, one rank none at all
(`predict(on_ranks=True)`).

Each rank evaluates every N-th batch and reads the rows from their owners;
the metrics' totals (AUC's buckets, means' sums and counts, the loss) are
summed over the ranks, so every rank reports what one process evaluating
the whole table reports (it restores the merged tables whole).
"""
import json

import numpy as np
import pytest

from tests.helpers.processes import horovod
from tests.helpers.processes import run
from tests.helpers.processes import PYTHON
from tests.workers import evaluation_on_ranks

WORKER = ["-m", "tests.workers.evaluation_on_ranks"]

MEANS = ("loss", "accuracy", "precision", "recall",
         "prediction/mean", "label/mean", "calibration")
"""Metrics from sums and counts: equal to float32 rounding."""

AUC_RESOLUTION = 1e-3
"""The AUC metrics' thresholds are 1/1000 apart (`auc_thresholds`)."""


def _metrics(out, name, rank):
  with open(out / f"{name}-rank{rank}.json") as f:
    return json.load(f)


def _assert_same(got, expected):
  assert set(got) == set(expected)
  assert got["global_step"] == expected["global_step"]
  for key in MEANS:
    assert got[key] == pytest.approx(expected[key], abs=1e-6), key
  for key in ("auc", "auc_precision_recall"):
    assert got[key] == pytest.approx(expected[key], abs=AUC_RESOLUTION), key


@pytest.mark.parametrize("ranks,eval_steps", [(2, None), (4, 3)])
def test_ranks_evaluate_as_one_process(ranks, eval_steps, tmp_path):
  """2 ranks over five batches (one rank reads an empty last one), 4 ranks
  over the first three (one rank reads none but empty ones)."""
  out, model_dir = tmp_path / "out", tmp_path / "model"
  steps = [] if eval_steps is None else [f"--eval_steps={eval_steps}"]
  result = horovod(ranks, WORKER + [f"--model_dir={model_dir}",
                                    f"--out_dir={out}"] + steps, timeout=300)
  assert f"on {ranks} Horovod ranks" in result.stdout + result.stderr
  run([PYTHON] + WORKER + [f"--model_dir={model_dir}", f"--out_dir={out}",
                           "--distribution=none", "--steps=0",
                           "--name=one"] + steps, timeout=240)
  one = _metrics(out, "one", 0)
  assert one["global_step"] == 30
  assert 0.55 < one["auc"] < 1.0  # it learnt: a metric worth comparing
  for rank in range(ranks):
    _assert_same(_metrics(out, "eval", rank), one)
  assert f"Predicting from {model_dir}" in result.stdout + result.stderr
  alone = np.load(out / "one-rank0.npy")
  assert len(alone) == evaluation_on_ranks.EVAL_EXAMPLES
  for rank in range(ranks):
    scores = np.load(out / f"eval-rank{rank}.npy")
    assert len(scores) == evaluation_on_ranks.predicted(rank)
    np.testing.assert_allclose(scores, alone[:len(scores)], rtol=0,
                               atol=1e-6)
    # Each rank held its own share of each table's rows, not the table.
    with open(out / f"eval-rank{rank}-shapes.json") as f:
      shapes = json.load(f)
    assert shapes["model/hashed_table"] == [64 // ranks, 4], shapes
    assert shapes["model/raw_table"] == [96 // ranks, 4], shapes


def test_a_hook_stopping_one_rank_stops_every_rank_one_batch_later(tmp_path):
  """Every batch's lookups are collectives: a rank that stopped alone would
  leave the other waiting in the next one for ever. Rank 0's hook asks to
  stop after its first batch, of 3 to evaluate and 5 to predict (rank 1: 4);
  both ranks run a second and stop."""
  out = tmp_path / "out"
  horovod(2, WORKER + [f"--model_dir={tmp_path / 'model'}", f"--out_dir={out}",
                       "--steps=2", "--rank0_stops_after=1"], timeout=300)
  for rank in range(2):
    with open(out / f"eval-rank{rank}-batches.json") as f:
      assert json.load(f) == {"evaluate": 2, "predict": 2}, rank

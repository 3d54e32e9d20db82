"""AdaScale with S != n on 2 Horovod ranks; LARS and LAMB on every backend."""
import json

import pytest

from tests.helpers import golden
from tests.helpers import shared
from tests.helpers.processes import PYTHON, dump_args, horovod, run
from tests.helpers.results import (load_workers, max_difference,
                                   trained_variables)


_CASES = (0, 1, 3)
"""The golden.SCALE_CASES these tests check (S = 4 and 1.5, theta = 0 and
the default)."""


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
  """case -> its workers' dumps; every case a run of one horovodrun job
  (dump_run's --runs), the job run once per session."""
  def train(root):
    runs = [{"batch_scale": golden.SCALE_CASES[case][0],
             "adascale_smoothing": golden.SCALE_CASES[case][1]}
            for case in _CASES]
    horovod(2, dump_args(root / "out", root / "model", distribution="horovod",
                         case="sum_linear",
                         inputs=json.dumps(golden.SCALE_ROWS),
                         global_batch_size=2, steps=2, optimizer="sgd",
                         lr_scaling="adascale", runs=json.dumps(runs)))
  root = shared.once(tmp_path_factory, "adascale-scale-two-ranks", train)
  return lambda case: load_workers(root / "out" / str(_CASES.index(case)))


@pytest.mark.parametrize("case", _CASES,
                         ids=[golden.SCALE_IDS[i] for i in _CASES])
def test_gain_for_scale_other_than_samples_on_two_ranks(case, two_ranks):
  """The one-process goldens, with the n = 2 samples on two ranks.

  Rows are sharded round-robin and each rank takes one per update, so
  update 1 averages rows 0-1 and update 2 rows 2-3, as the one-process test
  with accumulation_steps=2 does; the hand derivation there applies as is.
  """
  scale, _, gain1, gain2, var, sqr, weight = golden.SCALE_CASES[case]
  workers = two_ranks(case)
  assert len(workers) == 2
  for worker in workers:
    ema_weight = float(worker["adascale/ema_weight@0"])
    assert float(worker["adascale/gain@0"]) == pytest.approx(gain2, rel=1e-5)
    assert float(worker["adascale/progress@0"]) == pytest.approx(
        gain1 + gain2, rel=1e-5)
    assert float(worker["adascale/scale@0"]) == scale
    assert ema_weight == pytest.approx(weight, rel=1e-5)
    assert float(worker["adascale/grad_var_avg@0"]) / ema_weight == (
        pytest.approx(var, rel=1e-5))
    assert float(worker["adascale/grad_sqr_avg@0"]) / ema_weight == (
        pytest.approx(sqr, abs=1e-6))


LARGE_BATCH = {"lars": 10.0, "lamb": 0.02}
"""Each large-batch optimizer's rate in its runs."""

_ONE = [("mirrored", 1), ("none", 4), ("none", 1)]
"""The one-process runs of each optimizer: (distribution, k)."""


@pytest.fixture(scope="module")
def large_batch_runs(tmp_path_factory):
  """optimizer -> {"hvd", "mirrored1", "none4", "none1"} -> its out
  directory: 2 ranks x 2 micro-batches, and the one-process runs, of every
  optimizer in one Horovod job and one process, once per session."""
  names = list(LARGE_BATCH)
  rates = [dict(optimizer=o, learning_rate=LARGE_BATCH[o]) for o in names]

  def start(mode, out, model_dir, **flags):
    if mode == "horovod":
      return horovod(2, dump_args(out, model_dir, **flags))
    return run([PYTHON] + dump_args(out, model_dir, **flags))

  out = shared.runs_once(
      tmp_path_factory, "large-batch", start,
      {"horovod": ([dict(r, distribution="horovod", accumulation_steps=2)
                    for r in rates], {}),
       "none": ([dict(r, distribution=mode, accumulation_steps=k)
                 for mode, k in _ONE for r in rates], {})},  # mirrored first
      case="mlp", examples=64, global_batch_size=16, steps=10)

  def outs(optimizer):
    index = names.index(optimizer)
    found = {"hvd": out("horovod", index)}
    found.update({f"{mode}{k}": out("none", i * len(names) + index)
                  for i, (mode, k) in enumerate(_ONE)})
    return found
  return outs


@pytest.mark.parametrize("optimizer", list(LARGE_BATCH))
def test_lars_and_lamb_match_across_backends(optimizer, large_batch_runs):
  """2 ranks x 2 micro-batches apply what 4 micro-batches in one process do,
  and MirroredStrategy's replicas what one process does.

  The rates move a layer by about 1-2 % of its norm per update, so an
  optimizer that saw a rank's or replica's gradient instead of the reduced
  one (another norm, so another trust ratio) would be off by 1e-3 or more.
  The replicas sum in another order than one process, and LARS's excluded
  biases take plain momentum steps at rate 10, which magnifies that
  rounding to about 1e-5: hence their looser tolerance. (Ranks split the
  examples into other samples than one process does, so AdaScale's gain
  would differ: identity scaling here.)
  """
  outs = large_batch_runs(optimizer)
  for out, reference, tolerance in (("hvd", "none4", 1e-5),
                                    ("mirrored1", "none1", 1e-4)):
    expected = trained_variables(load_workers(outs[reference])[0])
    workers = load_workers(outs[out])
    assert len(workers) == (2 if out == "hvd" else 1), out
    for worker in workers:
      assert max_difference(expected, trained_variables(worker)) <= (
          tolerance), out

"""AdaScale when the scale S is not the number n of gradient samples per update.

The expected values and their derivation are in tests/helpers/golden.py.
"""
import numpy as np
import pytest

from tests.helpers import golden
from tests.helpers import trainer
from tests.workers import tiny_models


def _run_over_rows(tmp_path, name, global_batch, steps, **config):
  """SGD with AdaScale on SumLinear over golden.SCALE_ROWS, read in order."""
  x = np.array(golden.SCALE_ROWS, np.float32)
  return trainer.train(tiny_models.SumLinear(2, True),
                       {"x": x, "id": np.arange(len(x))}, np.zeros(len(x)),
                       tmp_path / name, global_batch, steps, optimizer="sgd",
                       lr_scaling="adascale", **config)


def _value(estimator, name):
  return float(estimator.get_variable_value(f"adascale/{name}"))


@pytest.mark.parametrize("scale,theta,gain1,gain2,var,sqr,weight",
                         golden.SCALE_CASES, ids=golden.SCALE_IDS)
def test_gain_for_scale_other_than_samples(scale, theta, gain1, gain2, var,
                                           sqr, weight, tmp_path):
  estimator = _run_over_rows(tmp_path, "run", 2, 2, batch_scale=scale,
                             accumulation_steps=2, adascale_smoothing=theta)
  assert _value(estimator, "gain") == pytest.approx(gain2, rel=1e-5)
  assert _value(estimator, "progress") == pytest.approx(gain1 + gain2,
                                                        rel=1e-5)
  assert _value(estimator, "scale") == scale
  ema_weight = _value(estimator, "ema_weight")
  assert ema_weight == pytest.approx(weight, rel=1e-5)
  assert _value(estimator, "grad_var_avg") / ema_weight == pytest.approx(
      var, rel=1e-5)
  assert _value(estimator, "grad_sqr_avg") / ema_weight == pytest.approx(
      sqr, abs=1e-6)


def test_restart_with_more_samples_continues_the_estimates(tmp_path):
  """The S = 1 estimates carry over when n changes from 2 to 4 (S = 4)."""
  # Global batch 4 = all rows per update; S = 4, so the S = 1 batch is one
  # example before and after the restart.
  # Run 1: accumulation 2 -> n = 2 micro-batches of 2 rows, theta = 0.998.
  #   Micro-batch means x = [.5, .5] and [0, 0]: ||g_i||^2 = 3 and 2, sum 5;
  #   mean x = [.25, .25]: ||g||^2 = 2*(.0625 + .0625) + 2 = 2.25.
  #   v = (5 - 2*2.25)/1 = 0.5; sigma^2 = 0.5 * 4/2 = 1; mu^2 = 2.25 - 1/4 = 2;
  #   r = 3/2.25 = 4/3 at both (identical) updates. weight = 1 - 0.998^2.
  first = _run_over_rows(tmp_path, "run", 4, 2, batch_scale=4,
                         accumulation_steps=2)
  assert _value(first, "gain") == pytest.approx(4 / 3, rel=1e-5)
  assert _value(first, "grad_var_avg") / _value(first, "ema_weight") == (
      pytest.approx(1.0, rel=1e-5))
  # Run 2 from its checkpoint: accumulation 4 -> n = 4 single rows,
  #   theta = 1 - 4/1000 = 0.996.
  #   ||g_i||^2 = 4, 4, 6, 6, sum 20; ||g||^2 = 2.25 (same mean);
  #   v = (20 - 4*2.25)/3 = 11/3; sigma^2 = 11/3 * 4/4 = 11/3;
  #   mu^2 = 2.25 - 11/12 = 4/3.
  #   Carried: p = 0.996 * (1 - 0.998^2) = 0.003980016 on (sigma^2, mu^2) =
  #   (1, 2); new: 0.004 on (11/3, 4/3).
  #   sigma^2 sum = p + 0.004*11/3,  mu^2 sum = 2p + 0.004*4/3,
  #   r3 = (3p + 0.02)/(2.25p + 0.009) = 0.031940048/0.017955036.
  #   (Had n = 2's per-sample variance 0.5 been stored, r would be 1.176 in
  #   run 1; had the estimates restarted from zero, r3 would be 5/2.25.)
  second = _run_over_rows(tmp_path, "run", 4, 3, batch_scale=4,
                          accumulation_steps=4)
  assert _value(second, "gain") == pytest.approx(0.031940048 / 0.017955036,
                                                 rel=1e-5)
  assert _value(second, "progress") == pytest.approx(
      8 / 3 + 0.031940048 / 0.017955036, rel=1e-5)
  assert _value(second, "ema_weight") == pytest.approx(0.007980016, rel=1e-5)
  assert _value(second, "scale") == 4.0


"""AdaScale when the scale S is not the number n of gradient samples per update.

Every expected value here is derived by hand from SumLinear(2, bias=True),
whose loss is the batch mean of the sum of its two outputs: one example x
has the gradient kernel = [x, x] (each column x), bias = [1, 1], so
||g||^2 = 2 ||x||^2 + 2 whatever the weights, and a micro-batch's gradient
is that of its mean x. With n samples g_i of mean g:

  v = (sum ||g_i||^2 - n ||g||^2) / (n - 1)   the variance of one sample
  sigma^2 = v S / n                            at the S = 1 batch (total/S)
  mu^2 = max(||g||^2 - sigma^2 / S, 0)
  r = (sigma^2 + mu^2) / (sigma^2 / S + mu^2)

and sigma^2 and mu^2 are averaged with weights theta^k (1 - theta), whose
common factor cancels in r.
"""
import numpy as np
import pytest

from tests import trainer
from tests.workers import tiny_models

# Update 1 reads rows 0-1, update 2 rows 2-3 (no shuffling, one example per
# micro-batch with global batch 2 and accumulation_steps=2).
ROWS = [[1, 0], [0, 1], [-1, 1], [1, -1]]

# n = 2 samples per update; default theta = 1 - n/1000 = 0.998 (not 1 - S/1000).
# Update 1: ||g_i||^2 = 2*1 + 2 = 4 each, sum 8; mean x = [.5, .5], so
#   ||g||^2 = 2*(.25 + .25) + 2 = 3; v = (8 - 2*3)/1 = 2; sigma^2 = 2 S/2 = S;
#   mu^2 = 3 - S/S = 2; r1 = (S + 2)/(1 + 2).
# Update 2: ||g_i||^2 = 2*2 + 2 = 6 each, sum 12; mean x = [0, 0], so
#   ||g||^2 = 2; v = (12 - 2*2)/1 = 8; sigma^2 = 8 S/2 = 4S;
#   mu^2 = max(2 - 4S/S, 0) = 0.
#   Averages (over (1 - theta)): sigma^2: theta*S + 4S, mu^2: theta*2 + 0, so
#   r2 = (theta*S + 4S + 2 theta) / (theta + 4 + 2 theta).
# S = 4:   r1 = 6/3 = 2.
#   theta = 0:     r2 = 16/4 = 4.
#   theta = 0.998: r2 = (3.992 + 16 + 1.996)/(0.998 + 4 + 1.996)
#                     = 21.988/6.994.
# S = 1.5: r1 = 3.5/3.
#   theta = 0:     r2 = 6/4 = 1.5.
#   theta = 0.998: r2 = (1.497 + 6 + 1.996)/(0.998 + 4 + 1.996) = 9.493/6.994.
# The stored averages over ema_weight are sigma^2 and mu^2 at the S = 1 batch:
#   theta = 0:     sigma^2 = 4S, mu^2 = 0 (update 2 alone), weight 1.
#   theta = 0.998: weight = 1 - 0.998^2 = 0.003996,
#                  sigma^2 = (0.998 S + 4S)/1.998, mu^2 = 1.996/1.998.
GOLDEN = [
    (4.0, 0.0, 2.0, 4.0, 16.0, 0.0, 1.0),
    (4.0, None, 2.0, 21.988 / 6.994, 19.992 / 1.998, 1.996 / 1.998,
     0.003996),
    (1.5, 0.0, 3.5 / 3, 1.5, 6.0, 0.0, 1.0),
    (1.5, None, 3.5 / 3, 9.493 / 6.994, 7.497 / 1.998, 1.996 / 1.998,
     0.003996),
]
GOLDEN_IDS = [f"S={case[0]:g},theta={case[1]}" for case in GOLDEN]


def _run_over_rows(tmp_path, name, global_batch, steps, **config):
  """SGD with AdaScale on SumLinear over ROWS, read in order."""
  x = np.array(ROWS, np.float32)
  return trainer.train(tiny_models.SumLinear(2, True),
                       {"x": x, "id": np.arange(len(x))}, np.zeros(len(x)),
                       tmp_path / name, global_batch, steps, optimizer="sgd",
                       lr_scaling="adascale", **config)


def _value(estimator, name):
  return float(estimator.get_variable_value(f"adascale/{name}"))


@pytest.mark.parametrize("scale,theta,gain1,gain2,var,sqr,weight", GOLDEN,
                         ids=GOLDEN_IDS)
def test_gain_for_scale_other_than_samples(scale, theta, gain1, gain2, var,
                                           sqr, weight, tmp_path):
  estimator = _run_over_rows(tmp_path, "run", 2, 2, scale=scale,
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
  first = _run_over_rows(tmp_path, "run", 4, 2, scale=4, accumulation_steps=2)
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
  second = _run_over_rows(tmp_path, "run", 4, 3, scale=4,
                          accumulation_steps=4)
  assert _value(second, "gain") == pytest.approx(0.031940048 / 0.017955036,
                                                 rel=1e-5)
  assert _value(second, "progress") == pytest.approx(
      8 / 3 + 0.031940048 / 0.017955036, rel=1e-5)
  assert _value(second, "ema_weight") == pytest.approx(0.007980016, rel=1e-5)
  assert _value(second, "scale") == 4.0


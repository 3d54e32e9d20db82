"""AdaScale golden values, derived by hand; in-process and multi-process
tests check the same numbers.

GAINS: the gain of one update from two gradient samples (the rows), S = n = 2.
SCALE_*: two updates when the scale S is not the number n of samples.

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

# (rows, gain, tolerance) of SumLinear, whose gradient per row is the row.
GAINS = [([[1, 0], [0, 1]], 4 / 3, 1e-6), ([[1, 1], [1, 1]], 1.0, 1e-5),
         ([[-1, 1], [1, -1]], 2.0, 1e-6),
         ([[1, 4], [5, 0.5]], 1.4688796680497926, 1e-6)]

# Update 1 reads rows 0-1, update 2 rows 2-3 (no shuffling, one example per
# micro-batch with global batch 2 and accumulation_steps=2).
SCALE_ROWS = [[1, 0], [0, 1], [-1, 1], [1, -1]]

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
SCALE_CASES = [
    (4.0, 0.0, 2.0, 4.0, 16.0, 0.0, 1.0),
    (4.0, None, 2.0, 21.988 / 6.994, 19.992 / 1.998, 1.996 / 1.998,
     0.003996),
    (1.5, 0.0, 3.5 / 3, 1.5, 6.0, 0.0, 1.0),
    (1.5, None, 3.5 / 3, 9.493 / 6.994, 7.497 / 1.998, 1.996 / 1.998,
     0.003996),
]
SCALE_IDS = [f"S={case[0]:g},theta={case[1]}" for case in SCALE_CASES]

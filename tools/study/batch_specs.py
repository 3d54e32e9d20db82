"""What the large-batch study runs: click models at global batches of 4K-64K.

The click study (click_specs.py) stops at global batches of 1K-2K; click
models train at 4K-128K. Here the zoo's wide & deep learns from Criteo-shaped
raw-id logs (`click_data` with `raw_ids`) in dynamic tables, at a micro-batch
of 512 and S = 8 to 128 such micro-batches an update, made by accumulation
on one process as in the click study. Per method and S (T: the S = 1 run's
updates, one epoch; step decay x 0.1 at 50% and 75%):

  baseline   S = 1: T updates at the S = 1 rate;
  identity   the same rate, ceil(T/S) updates;
  LSW        lr x S, linear warm-up over the first 5.5% of ceil(T/S) updates;
  sqrt       lr x sqrt(S), ceil(T/S) updates;
  CowClip    Zheng et al., AAAI 2023: tables at the S = 1 rate with each
             id's gradient clipped by its row's norm, dense at lr x sqrt(S);
             ceil(T/S) updates;
  AS         AdaScale, one gain, on the schedule read at floor(tau);
  AS-parts   AdaScale with a gain for the tables and one for the dense part.

AdaScale stops at tau = T or at CAP times the S = 1 run's examples,
whichever comes first (the page says where the cap bound). Every run keeps
about CHECKPOINTS checkpoints per epoch, so the page can say how many
examples each needed to reach the S = 1 AUC less AUC_MARGIN.

Specs are plain dicts that click_runs.train_run takes; nothing here imports
TensorFlow.
"""
import math

from tools.study import click_specs
from tools.study import specs as digits

MODEL = "wide_deep"
TRAIN_ROWS = 5_000_000
EVAL_ROWS = 500_000
TABLE_ROWS = 1 << 19
"""Rows of each dynamic table: more than the distinct ids any column has in
TRAIN_ROWS examples, so every id keeps its own row."""
HPARAMS = {"embedding": "dynamic", "raw_ids": 1,
           "hash_bucket_size": TABLE_ROWS, "train_rows": TRAIN_ROWS,
           "eval_rows": EVAL_ROWS}
MICRO_BATCH = 512
T = math.ceil(TRAIN_ROWS / MICRO_BATCH)
"""The S = 1 run's updates: one epoch, as click models usually train."""
LEARNING_RATES = {"adagrad": 0.05, "adam": 0.001, "lazy_adam": 0.001}
"""The S = 1 rate of each optimizer; every method derives its own."""
METHODS = ("identity", "LSW", "sqrt", "CowClip", "AS", "AS-parts")
RULES = {"baseline": "identity", "identity": "identity", "LSW": "linear",
         "sqrt": "sqrt", "CowClip": "cowclip", "AS": "adascale",
         "AS-parts": "adascale"}
PARTS = {"AS-parts": "embeddings,dense"}
"""`adascale_parts` of a method; "all" where absent."""
ADASCALE = ("AS", "AS-parts")
SCALES = (8, 32, 64, 128)
OPTIMIZERS = ("adagrad", "adam", "lazy_adam")
ADAMS = ("adam", "lazy_adam")
"""`lazy_adam` updates only the rows looked up (and their slots), as click
models use Adam; TensorFlow's `adam` moves every row at every update."""
ADAM_SCALES = (64, 128)
"""Both Adams run their S = 1 baseline and every method at these S only."""
CAP = 3
"""AdaScale reads at most this many times the S = 1 run's examples."""
CHECKPOINTS = 8
"""Checkpoints per epoch (S = 1's examples) of every run."""
AUC_MARGIN = click_specs.AUC_MARGIN
WARMUP_FRACTION = click_specs.WARMUP_FRACTION
DECAY_FRACTIONS = click_specs.DECAY_FRACTIONS
DECAY_RATE = click_specs.DECAY_RATE


def run_spec(optimizer, method, scale, seed=0, threads=1):
  """One run: a segment of `scale` micro-batches an update on one process."""
  click_specs.check_choice("optimizer", optimizer, OPTIMIZERS)
  click_specs.check_choice("method", method, ("baseline",) + METHODS)
  if scale < 1 or (method == "baseline") != (scale == 1):
    raise ValueError(f"scale={scale}: the baseline runs at S = 1 only, "
                     "every other method at S > 1")
  epoch = math.ceil(T / scale)
  adascale = method in ADASCALE
  boundaries = digits.decay_boundaries(T if adascale else epoch,
                                       DECAY_FRACTIONS)
  segment = dict(
      scale=scale, ranks=1, accumulation_steps=scale, optimizer=optimizer,
      optimizer_options=click_specs.OPTIONS[optimizer], linear_optimizer=None,
      schedule=dict(lr_schedule="piecewise",
                    learning_rate=LEARNING_RATES[optimizer],
                    lr_boundaries=boundaries, lr_decay_rate=DECAY_RATE),
      lr_scaling=RULES[method], adascale_parts=PARTS.get(method, "all"),
      warmup=(digits.warmup_updates(epoch, WARMUP_FRACTION)
              if method == "LSW" else 0),
      tau=T if adascale else None,
      max_updates=CAP * epoch if adascale else epoch,
      checkpoint_every=max(1, math.ceil(epoch / CHECKPOINTS)))
  return dict(model=MODEL, hparams=dict(HPARAMS), micro_batch_size=MICRO_BATCH,
              optimizer=optimizer, method=method, scales=(scale,),
              ranks=(1,), segments=[segment], timed=True, seed=seed,
              threads=threads)


def grid(optimizers=("adagrad",), methods=METHODS, scales=SCALES, seeds=1):
  """Every run of the sweep: each optimizer's baseline and its cells."""
  for optimizer in optimizers:
    click_specs.check_choice("optimizer", optimizer, OPTIMIZERS)
  for method in methods:
    click_specs.check_choice("method", method, METHODS)
  for scale in scales:
    click_specs.check_choice("scale", scale, SCALES)
  specs = []
  for optimizer in optimizers:
    mine = [s for s in scales if optimizer not in ADAMS or s in ADAM_SCALES]
    cells = [("baseline", 1)] + [(m, s) for s in mine for m in methods]
    specs += [run_spec(optimizer, method, scale, seed)
              for method, scale in cells for seed in range(seeds)]
  return specs


def priority(spec):
  """The order runs start in: the S = 1 baseline every row needs, then the
  largest S first, where the page's judgement lies; AdaScale first at each
  S, as it runs longest."""
  method = spec["method"]
  return (spec["scales"] != (1,), -spec["scales"][0],
          method not in ADASCALE, METHODS.index(method)
          if method in METHODS else -1)


def examples(spec_or_run):
  """Examples an update of the run reads."""
  return spec_or_run["scales"][0] * MICRO_BATCH

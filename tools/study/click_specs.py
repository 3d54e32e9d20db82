"""What the click study runs: AdaScale and its rivals on census and MovieLens.

The digits study (specs.py) asks whether AdaScale keeps accuracy as S
grows; this one asks it where seed 000's user works: click models with
embedding tables, adaptive optimizers, AUC as the metric (a loss of 0.001
matters). S is the number of gradient samples of the task's micro-batch an
update averages: Horovod ranks x accumulation steps. Per task, optimizer
and S (T: the S = 1 run's updates, step decay x 0.1 at 50% and 75%):

  baseline  S = 1: T updates of the optimizer at its S = 1 rate;
  identity  the same rate, ceil(T/S) updates (a bigger batch, nothing else);
  LSW       lr x S, linear warm-up over the first 5.5% of ceil(T/S) updates;
  sqrt      lr x sqrt(S), ceil(T/S) updates;
  AS        AdaScale on the schedule read at floor(tau), stopped at tau = T;
  seed000   seed 000's recipe: AdamW at lr x S (no warm-up), ceil(T/S)
            updates; its S = 1 row is AdamW's own baseline.

Optimizers: Adagrad (every method), momentum SGD, Adam, and `ftrl`: FTRL on
the wide (linear) part and Adagrad on the deep part, as DNNLinearCombined
trains them, through `TrainingConfig(linear_optimizer="ftrl")`; both parts
take one rate (Adagrad's) and, under AS, one gain.

Every run of the S sweep makes S by accumulation on one process: the same
update as ranks x accumulation (the mean of S micro-batch gradients), and
2 cores cannot give every cell its ranks. Real ranks make the time rows
(`TIME_SCALE` on 1, 2 and 4 ranks, checkpoints along the way to time the
AUC) and the elastic rows (2 -> 4 -> 2 ranks, one horovodrun job per third
of T resuming from the previous third's checkpoint).

Specs are plain dicts (a pool worker takes one); nothing here imports
TensorFlow.
"""
import math

from tools.study import specs as digits

METHODS = ("identity", "LSW", "sqrt", "AS", "seed000")
RULES = {"baseline": "identity", "identity": "identity", "LSW": "linear",
         "sqrt": "sqrt", "AS": "adascale", "seed000": "linear"}
MAIN_OPTIMIZER = "adagrad"
"""The click models' usual optimizer, the one every method runs with."""
OTHER_OPTIMIZERS = ("momentum", "adam", "ftrl")
LINEAR_OPTIMIZERS = {"ftrl": MAIN_OPTIMIZER}
"""Optimizers that train only the linear part, and the deep part's."""
SCALES = (1, 2, 4, 8, 16, 32, 64)
GRID = {MAIN_OPTIMIZER: {"AS": SCALES[1:], "LSW": SCALES[1:],
                         "seed000": SCALES[1:], "identity": SCALES[1:],
                         "sqrt": (64,)},
        "momentum": {"AS": (64,)}, "adam": {"AS": (64,)},
        "ftrl": {"AS": (16, 64), "LSW": (16, 64)}}
"""The S > 1 cells of the sweep per optimizer and method: the issue judges
AS beside LSW and seed 000's recipe at every S, so those three (and the
identity rule, the floor) run at every S with Adagrad; the other
optimizers run fewer cells, to fit 2 shared cores."""
ELASTIC_RANKS = (2, 4, 2)
ELASTIC_ACCUMULATION = 4
"""Elastic rows: ranks per third of T, accumulation steps per rank (S 8 ->
16 -> 8)."""
ELASTIC_METHODS = ("AS", "LSW")
TIME_SCALE = 64
TIME_RANKS = (1, 2, 4)
TIME_METHODS = ("AS", "LSW", "seed000")
TIME_CHECKPOINTS = 8
"""Time rows: S = 64, AS on 1, 2 and 4 ranks (64, 32, 16 accumulation
steps), the two recipes it is judged beside on 1 (on more ranks the same
updates only cost more time on 2 cores), about this many checkpoints each, evaluated after training
to find when AUC first reached the target. S = 64 is what 8 to 64 hosts of
the network model run with 8 to 1 accumulation steps."""
AUC_MARGIN = 0.001
"""Time to AUC: to the S = 1 baseline's final AUC minus this."""
AUC_TOLERANCE = 0.002
"""The target: AS's mean AUC within this of the S = 1 baseline's."""
WARMUP_FRACTION = 0.055
DECAY_FRACTIONS = (0.5, 0.75)
DECAY_RATE = 0.1
OPTIONS = {"momentum": (("momentum", 0.9),), "adagrad": (), "adam": (),
           "lazy_adam": (),
           "adamw": (("weight_decay", 0.01),), "ftrl": ()}
TASKS = {
    "census": {"T": 2000, "micro_batch_size": 16,
               "learning_rates": {"adagrad": 0.1, "momentum": 0.05,
                                  "adam": 0.003, "adamw": 0.003,
                                  "ftrl": 0.1}},
    "movielens": {"T": 2500, "micro_batch_size": 32,
                  "learning_rates": {"adagrad": 0.5, "momentum": 0.1,
                                     "adam": 0.003, "adamw": 0.003,
                                     "ftrl": 0.5}},
}
"""Per task: T (about one epoch of its training split: 32,561 census rows,
80,000 MovieLens ratings), the micro-batch and each optimizer's S = 1 rate
(tuned at S = 1 only; the other methods derive theirs from it). `ftrl`
has Adagrad's: TrainingConfig gives both parts one schedule, and the deep
part needs Adagrad's."""
NEVER = digits.NEVER


def check_choice(name, value, valid):
  """Raises ValueError naming the argument unless value is in valid."""
  if value not in valid:
    raise ValueError(f"{name}={value!r} is not valid; valid: "
                     f"{', '.join(map(str, valid))}")


def _segment(settings, optimizer, method, scale, stop, boundaries, warmup,
             ranks, checkpoints):
  """One train() call: rule, schedule, accumulation and where it stops.

  `stop` is the global_step to stop at, or for AS the tau.
  """
  if method == "seed000":
    optimizer = "adamw"
  rate = settings["learning_rates"][optimizer]
  linear = None
  if optimizer in LINEAR_OPTIMIZERS:
    linear, optimizer = optimizer, LINEAR_OPTIMIZERS[optimizer]
  adascale = method == "AS"
  updates = math.ceil(stop / scale) if adascale else stop
  return dict(
      scale=scale, ranks=ranks, accumulation_steps=scale // ranks,
      optimizer=optimizer, optimizer_options=OPTIONS[optimizer],
      linear_optimizer=linear,
      schedule=dict(lr_schedule="piecewise", learning_rate=rate,
                    lr_boundaries=boundaries, lr_decay_rate=DECAY_RATE),
      lr_scaling=RULES[method],
      warmup=warmup if method == "LSW" and scale > 1 else 0,
      tau=stop if adascale else None,
      max_updates=settings["T"] if adascale else stop,
      checkpoint_every=(max(1, math.ceil(updates / TIME_CHECKPOINTS))
                        if checkpoints else None))


def run_specs(settings, optimizer, method, scales, ranks=(1,),
              checkpoints=False):
  """One spec per seed: `scales` and `ranks` per segment (one each, or an
  elastic run's three)."""
  check_choice("method", method, ("baseline",) + METHODS)
  if len(ranks) != len(scales) or any(s % r for s, r in zip(scales, ranks)):
    raise ValueError(f"ranks={ranks} must divide scales={scales} one to one")
  T = settings["T"]
  if len(scales) > 1:
    if method == "AS":
      stops = [T * (i + 1) / len(scales) for i in range(len(scales))]
      boundaries = digits.decay_boundaries(T, DECAY_FRACTIONS)
      warmup = 0
    else:
      counts = digits.elastic_updates(T, scales)
      stops = [sum(counts[:i + 1]) for i in range(len(scales))]
      boundaries = digits.elastic_boundaries(T, scales, DECAY_FRACTIONS)
      warmup = digits.warmup_updates(sum(counts), WARMUP_FRACTION)
  else:
    updates = T if method in ("baseline", "AS") else math.ceil(T / scales[0])
    stops = [updates]
    boundaries = digits.decay_boundaries(updates, DECAY_FRACTIONS)
    warmup = digits.warmup_updates(updates, WARMUP_FRACTION)
  segments = [_segment(settings, optimizer, method, s, stop, boundaries,
                       warmup, r, checkpoints)
              for s, stop, r in zip(scales, stops, ranks)]
  spec = dict(settings, optimizer=optimizer, method=method,
              scales=tuple(scales), ranks=tuple(ranks), segments=segments,
              timed=checkpoints)
  return [dict(spec, seed=seed) for seed in range(settings["seeds"])]


def task_settings(model, seeds, scales=SCALES, steps=None,
                  optimizers=(MAIN_OPTIMIZER,) + OTHER_OPTIMIZERS,
                  methods=METHODS, elastic=True, timed=True, threads=1):
  """One task's settings: its T, micro-batch and rates, and the grid."""
  check_choice("task", model, tuple(TASKS))
  for optimizer in optimizers:
    check_choice("optimizer", optimizer, (MAIN_OPTIMIZER,) + OTHER_OPTIMIZERS)
  for method in methods:
    check_choice("method", method, METHODS)
  if seeds < 1:
    raise ValueError(f"seeds={seeds} must be >= 1")
  if not scales or any(s < 1 or s > TIME_SCALE for s in scales):
    raise ValueError(f"scales={scales} must be 1..{TIME_SCALE}")
  task = dict(TASKS[model])
  if steps:
    task["T"] = steps
  return dict(task, model=model, seeds=seeds, scales=tuple(scales),
              optimizers=tuple(optimizers), methods=tuple(methods),
              elastic=elastic, timed=timed,
              threads=threads)


def sweep(settings):
  """The S sweep: every method with the main optimizer, fewer cells with
  the others; each optimizer's S = 1 baseline (AdamW's for seed000)."""
  specs = []
  for optimizer in settings["optimizers"]:
    grid = GRID[optimizer]
    specs += run_specs(settings, optimizer, "baseline", (1,))
    if "seed000" in grid and "seed000" in settings["methods"]:
      specs += run_specs(settings, optimizer, "seed000", (1,))
    for method, scales in grid.items():
      for scale in scales:
        if method in settings["methods"] and scale in settings["scales"]:
          specs += run_specs(settings, optimizer, method, (scale,))
  return specs


def elastic(settings):
  """AS and LSW on 2 -> 4 -> 2 ranks (main optimizer)."""
  scales = tuple(r * ELASTIC_ACCUMULATION for r in ELASTIC_RANKS)
  return [spec for method in ELASTIC_METHODS if method in settings["methods"]
          for spec in run_specs(settings, MAIN_OPTIMIZER, method, scales,
                                ranks=ELASTIC_RANKS)]


def timed(settings):
  """AS at S = 64 on 1, 2 and 4 ranks, LSW and seed000 on 1, and the
  S = 1 baseline, with checkpoints to time the AUC; the first seed only."""
  one = dict(settings, seeds=1)
  specs = run_specs(one, MAIN_OPTIMIZER, "baseline", (1,), checkpoints=True)
  for method in (m for m in TIME_METHODS if m in settings["methods"]):
    for ranks in TIME_RANKS if method == "AS" else (1,):
      specs += run_specs(one, MAIN_OPTIMIZER, method, (TIME_SCALE,),
                         ranks=(ranks,), checkpoints=True)
  return specs


def all_specs(settings):
  """Every run of one task."""
  return (sweep(settings) + (elastic(settings) if settings["elastic"] else [])
          + (timed(settings) if settings["timed"] else []))


def expected_seconds(spec):
  """A rough cost, to start the longest runs first: start-up, session runs,
  examples (AS at large S reads several times T x micro-batch), and a
  horovodrun job per segment on more than one rank."""
  total = 8.0
  for segment in spec["segments"]:
    updates = (segment["tau"] / max(1.0, segment["scale"] / 8)
               if segment["tau"] else segment["max_updates"])
    examples = updates * segment["scale"] * spec["micro_batch_size"]
    total += 2e-3 * updates + 1e-4 * examples
    total += 25.0 * (segment["ranks"] > 1) * segment["ranks"]
  return total + (2.0 * TIME_CHECKPOINTS if spec["timed"] else 0.0)


def priority(spec):
  """The order runs start in: the S = 1 rows every delta needs, then the
  rest longest first (the pool's tail is short), the timed rows last (a
  study cut short keeps what its tables need most)."""
  return (spec["timed"], spec["scales"] != (1,), -expected_seconds(spec))


def label(spec):
  """A run's cell as the page names it: `census adagrad AS S=64 ranks=4`."""
  ranks = (f" ranks={digits.scale_label(spec['ranks'])}"
           if spec["ranks"] != (1,) * len(spec["ranks"]) else "")
  return (f"{spec['model']} {spec['optimizer']} {spec['method']} "
          f"S={digits.scale_label(spec['scales'])}{ranks}")

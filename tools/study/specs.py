"""What the AdaScale study runs: its tasks, methods, schedules and runs.

A small-scale replay of Table 2 of Johnson et al. (AdaScale SGD, ICML 2020)
on `digits_mlp` and `digits_cnn`. S is the number of gradient samples of
`--micro_batch_size` examples that one update averages: accumulation steps on
one process, or workers x accumulation steps under Horovod. Per task and S:

  baseline  S = 1: T updates of momentum SGD, step decay at 50% and 75% of T;
  AS        AdaScale, stopped once its progress tau reaches T (the same
            schedule, read at floor(tau));
  LSW       lr x S, warm-up over the first 5.5% of ceil(T/S) updates, decay
            boundaries moved to the same fractions of ceil(T/S);
  LSW+      LSW stretched to as many updates as AS took (mean over seeds);
  LARS      the large-batch ResNet recipe: LARS, lr x S, warm-up from 0 over
            5.5% of ceil(T/S) updates, then polynomial (power 2) decay to 0.

At S = 1, LSW and LSW+ are the baseline (x 1, no warm-up), so they are not
run there. Elastic rows change S during one run, as the paper's do: the run
restarts from its checkpoint with another accumulation count after each
third of T (8 -> 16 -> 32 and 32 -> 16 -> 8). AS carries tau and its
estimates across; LSW re-applies its rule at each change, with its decay
boundaries placed at the same S = 1 progress as the baseline's.

A run is a spec, a plain dict of its segments (one train() call each), so
that a worker process can take it; runs.py trains one. LSW+ needs AS's
update counts, so it runs in a second round (run_study). Nothing here
imports TensorFlow.
"""
import math
import statistics

METHODS = ("AS", "LSW", "LSW+", "LARS")
RULES = {"baseline": "identity", "AS": "adascale"}  # the rest: linear
ELASTIC = {"rising": (8, 16, 32), "falling": (32, 16, 8)}
ELASTIC_METHODS = ("AS", "LSW")
RANK_ELASTIC = {"up": (1, 2, 4), "down": (4, 2, 1)}
"""Horovod ranks per third of T of the rank-elastic rows (--rank_elastic):
each third is a horovodrun job of that many ranks on this host, resuming
from the previous third's checkpoint, as an elastic job resumes after a
change. RANK_ACCUMULATION accumulation steps per rank make S 8 -> 16 -> 32
and 32 -> 16 -> 8, the accumulation-based rows' scales."""
RANK_ACCUMULATION = 8
TASKS = {
    "digits_mlp": {"T": 20000, "micro_batch_size": 8, "learning_rate": 0.05,
                   "lars_learning_rate": 0.05, "adascale_smoothing": None},
    "digits_cnn": {"T": 6000, "micro_batch_size": 4, "learning_rate": 0.01,
                   "lars_learning_rate": 0.05, "adascale_smoothing": 0.9},
}
"""Per task: T, the S = 1 rates and AdaScale's smoothing. T is long enough
for the baseline to converge and short enough that both tasks fit `make
study` into 40 minutes (the CNN costs several times the MLP per example).
The CNN's runs are a few hundred updates long, shorter than the default
smoothing's memory (about 1000/n updates), so it sets a faster average, as
docs/adascale.md advises for short runs (None: the default)."""
TRACE_POINTS = 400  # (tau, gain, lr) samples per AdaScale run: enough to plot
NEVER = 10**9  # a checkpoint interval no run reaches: only the final save


def decay_boundaries(updates, fractions):
  """The step-decay boundaries of a run of `updates` updates.

  LSW and LSW+ decay at the same fractions of their own (shorter) runs as the
  baseline does of T, so every method sees the same shape of schedule.
  """
  return tuple(max(1, int(round(f * updates))) for f in fractions)


def warmup_updates(updates, fraction):
  """Linear scaling's warm-up: `fraction` of the run, at least one update."""
  return max(1, math.ceil(fraction * updates))


def base_lr(step, learning_rate, boundaries, decay_rate):
  """The piecewise schedule in Python, as TrainingConfig computes it in TF."""
  return learning_rate * decay_rate ** sum(step >= b for b in boundaries)


def adascale_lr(gain, tau_after, learning_rate, boundaries, decay_rate):
  """The lr AdaScale applied in an update, from the state it left behind.

  The update used gain x schedule(floor(tau)) with tau from before it, and
  then advanced tau by the gain; the trace sees only the state after.
  """
  return gain * base_lr(math.floor(tau_after - gain), learning_rate,
                        boundaries, decay_rate)


def scale_label(scales):
  """A row's S: `8` for a fixed scale, `8→16→32` for an elastic run."""
  return "→".join(str(s) for s in scales)


def elastic_updates(T, scales):
  """LSW's updates per segment of an elastic run: a third of T each."""
  return [math.ceil(T / len(scales) / s) for s in scales]


def elastic_boundaries(T, scales, fractions):
  """The updates at which an elastic LSW run has made `fractions` of T.

  Each segment advances S = 1 progress by its S per update, so the baseline's
  decay points (fractions of T in S = 1 steps) map to different updates
  depending on which segment they fall in.
  """
  boundaries = []
  for fraction in fractions:
    progress, done = fraction * T, 0
    for scale, updates in zip(scales, elastic_updates(T, scales)):
      if progress <= updates * scale:
        boundaries.append(max(1, int(round(done + progress / scale))))
        break
      progress -= updates * scale
      done += updates
    else:
      boundaries.append(done)
  return tuple(boundaries)


def _segment(settings, method, scale, stop, boundaries, warmup, workers):
  """One train() call of a run: its accumulation, rule, schedule and stop.

  `stop` is the update count (global_step) to stop at, or for AS the tau.
  """
  spread = workers > 1 and scale >= workers and scale % workers == 0
  if method == "LARS":
    schedule = dict(lr_schedule="polynomial",
                    learning_rate=settings["lars_learning_rate"],
                    lr_decay_steps=stop, lr_power=settings["lars_power"],
                    warmup_steps=warmup)
    optimizer = ("lars", (("momentum", settings["momentum"]),
                          ("trust_coefficient",
                           settings["lars_trust_coefficient"])))
  else:
    schedule = dict(lr_schedule="piecewise",
                    learning_rate=settings["learning_rate"],
                    lr_boundaries=boundaries,
                    lr_decay_rate=settings["decay_rate"])
    optimizer = ("momentum", (("momentum", settings["momentum"]),))
  adascale = method == "AS"
  return dict(
      scale=scale, optimizer=optimizer[0], optimizer_options=optimizer[1],
      schedule=schedule, lr_scaling=RULES.get(method, "linear"),
      # LSW's rule ramps lr up to S x lr; LARS warms up inside its schedule.
      warmup=warmup if method in ("LSW", "LSW+") and scale > 1 else 0,
      distribution="horovod" if spread else "none",
      accumulation_steps=scale // workers if spread else scale,
      tau=stop if adascale else None,
      max_updates=settings["T"] if adascale else stop,
      trace_every=max(1, math.ceil(settings["T"] / scale / TRACE_POINTS)))


def run_specs(settings, method, scales, as_updates=None, workers=1,
              ranks=None):
  """One spec (a plain dict, so a worker process can take it) per seed.

  `scales` is a tuple: one S, or an elastic run's S per third of T.
  `as_updates` (LSW+ only) is the mean number of updates AS took at this S.
  `ranks` (rank-elastic runs) gives the Horovod ranks of each third; the
  ranks share each S.
  Under Horovod, S that the ranks divide is spread over them; the rest (the
  baseline too) runs whole on every rank, which is redundant but needs no
  coordination.
  """
  T, fractions = settings["T"], settings["decay_fractions"]
  if len(scales) > 1:
    segments = []
    if method == "AS":
      for i, scale in enumerate(scales):
        segments.append(_segment(
            settings, method, scale, T * (i + 1) / len(scales),
            decay_boundaries(T, fractions), 0, workers))
    else:
      counts = elastic_updates(T, scales)
      boundaries = elastic_boundaries(T, scales, fractions)
      warmup = warmup_updates(sum(counts), settings["warmup_fraction"])
      for i, scale in enumerate(scales):
        segments.append(_segment(settings, method, scale, sum(counts[:i + 1]),
                                 boundaries, warmup, workers))
  else:
    scale = scales[0]
    if method in ("baseline", "AS"):
      updates = T
    elif method == "LSW+":
      updates = int(as_updates)
    else:
      updates = math.ceil(T / scale)
    segments = [_segment(
        settings, method, scale, updates,
        decay_boundaries(updates, fractions),
        warmup_updates(updates, settings["warmup_fraction"]), workers)]
  for segment, count in zip(segments, ranks or ()):
    segment.update(ranks=count, distribution="horovod",
                   accumulation_steps=segment["scale"] // count)
  spec = dict(method=method, scales=tuple(scales), segments=segments,
              ranks=tuple(ranks or ()))
  return [dict(settings, seed=seed, **spec)
          for seed in range(settings["seeds"])]


def rank_scales(ranks):
  """The S of each third of a rank-elastic run of `ranks` ranks."""
  return tuple(RANK_ACCUMULATION * r for r in ranks)


def task_settings(args, model, workers):
  """The settings of one task: the shared flags with the task's T and rates."""
  shared = {k: v for k, v in vars(args).items()
            if k not in ("out_dir", "steps", "tasks", "processes",
                         "learning_rate", "no_elastic", "micro_batch_size",
                         "rank_elastic", "segment")}
  task = dict(TASKS[model])
  for flag, key in (("steps", "T"), ("learning_rate", "learning_rate"),
                    ("micro_batch_size", "micro_batch_size")):
    if getattr(args, flag):
      task[key] = getattr(args, flag)
  return dict(shared, model=model, accuracy_points=1.0, updates_limit_S=32,
              workers=workers, decay_fractions=tuple(args.decay_fractions),
              elastic=[] if args.no_elastic else list(ELASTIC.values()),
              rank_elastic=(list(RANK_ELASTIC.values())
                            if args.rank_elastic and model == "digits_mlp"
                            else []),
              **task)


def expected_seconds(spec):
  """A rough cost, to start the longest runs first (the pool's tail is short).

  Session runs cost about a millisecond each; examples cost by task. AS at
  large S takes more examples than T x micro-batch (gain < S), so it counts
  double.
  """
  per_example = 2.5e-4 if spec["model"] == "digits_cnn" else 3e-5
  total = 0.0
  for segment in spec["segments"]:
    updates = (segment["tau"] / max(1, segment["scale"] / 2)
               if segment["tau"] else segment["max_updates"])
    examples = updates * segment["scale"] * spec["micro_batch_size"]
    total += 1e-3 * updates + per_example * examples
  return total


def first_round(settings, workers=1):
  """Every run that needs no other's result: all but LSW+."""
  specs = run_specs(settings, "baseline", (1,), workers=workers)
  for scale in settings["scales"]:
    for method in ("AS", "LSW", "LARS"):
      if method != "LSW" or scale > 1:
        specs += run_specs(settings, method, (scale,), workers=workers)
  for scales in settings["elastic"]:
    for method in ELASTIC_METHODS:
      specs += run_specs(settings, method, tuple(scales), workers=workers)
  for ranks in settings.get("rank_elastic", ()):
    for method in ELASTIC_METHODS:
      specs += run_specs(settings, method, rank_scales(ranks),
                         workers=workers, ranks=ranks)
  return specs


def second_round(settings, results, workers=1):
  """LSW+ at each S > 1, as long as AS took there (mean over seeds)."""
  specs = []
  for scale in settings["scales"]:
    taken = [r["updates"] for r in results
             if r["model"] == settings["model"] and r["method"] == "AS"
             and tuple(r["scales"]) == (scale,)]
    if scale > 1 and taken:
      specs += run_specs(settings, "LSW+", (scale,),
                         as_updates=round(statistics.fmean(taken)),
                         workers=workers)
  return specs


def run_study(tasks, run, workers=1):
  """All runs of every task, in two rounds shared by the tasks."""
  results = run([s for t in tasks for s in first_round(t, workers)])
  return results + run([s for t in tasks
                        for s in second_round(t, results, workers)])



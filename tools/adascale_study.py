"""AdaScale against linear scaling and LARS, S = 1..128, on two digit tasks.

  python tools/adascale_study.py --out_dir docs/adascale           # make study
  horovodrun -np 2 -H localhost:2 python tools/adascale_study.py ...

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

Runs are independent, so a pool of single-threaded processes (one per core)
shares them, each importing TensorFlow once and training its runs one after
another in fresh temporary model_dirs; LSW+ needs AS's update counts, so it
runs in a second round. Outputs: study.json, traces.json (AdaScale's gain and
lr per update), and their renderings by tools/study_plots.py.
"""
import argparse
import json
import math
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run as a script: make the checkout importable
  sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from tools import study_plots  # pylint: disable=g-import-not-at-top

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
docs/ADASCALE.md advises for short runs (None: the default)."""
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
  """The piecewise schedule in Python, as `es.Schedule` computes it in TF."""
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
    schedule = dict(name="polynomial",
                    learning_rate=settings["lars_learning_rate"],
                    decay_steps=stop, power=settings["lars_power"],
                    warmup_steps=warmup)
    optimizer = ("lars", (("momentum", settings["momentum"]),
                          ("trust_coefficient",
                           settings["lars_trust_coefficient"])))
  else:
    schedule = dict(name="piecewise", learning_rate=settings["learning_rate"],
                    boundaries=boundaries, decay_rate=settings["decay_rate"])
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


def mean_std(values):
  """Mean and sample standard deviation (0 for a single value)."""
  values = [float(v) for v in values]
  return statistics.fmean(values), (
      statistics.stdev(values) if len(values) > 1 else 0.0)


def _row(runs, scales, method, micro_batch_size, ranks=()):
  accuracy, accuracy_std = mean_std(r["accuracy"] for r in runs)
  mean = lambda key: mean_std(r[key] for r in runs)[0]
  if ranks:  # told apart from the accumulation-based row of the same S
    method = f"{method}, ranks {scale_label(ranks)}"
  return {"S": scale_label(scales), "method": method,
          "elastic": len(scales) > 1,
          "total_batch": scale_label([s * micro_batch_size for s in scales]),
          "accuracy_mean": round(accuracy, 3),
          "accuracy_std": round(accuracy_std, 3),
          "train_loss": float(f"{mean('train_loss'):.4g}"),
          "updates": round(mean("updates"), 1),
          "wall_seconds": round(mean("wall_seconds"), 2), "seeds": len(runs)}


def build_table(results, settings):
  """One task's JSON object from its runs' results.

  Accuracies are in percent of the test split; losses, updates and wall
  times are means over seeds. `target` records the study's criterion: AS
  within `accuracy_points` of the baseline at every S and in every elastic
  run, and at most twice the T/S updates of perfect scaling for S <= 32.
  """
  micro, T = settings["micro_batch_size"], settings["T"]
  mine = [r for r in results if r["model"] == settings["model"]]
  baseline = _row([r for r in mine if r["method"] == "baseline"], (1,),
                  "baseline", micro)
  groups = [((s,), m) for s in settings["scales"] for m in METHODS]
  groups += [(scales, m) for scales in settings["elastic"]
             for m in ELASTIC_METHODS]
  groups = [(scales, m, ()) for scales, m in groups] + [
      (_rank_scales(ranks), m, ranks)
      for ranks in settings.get("rank_elastic", ())
      for m in ELASTIC_METHODS]
  rows = []
  for scales, method, ranks in groups:
    runs = [r for r in mine
            if r["method"] == method and tuple(r["scales"]) == tuple(scales)
            and tuple(r.get("ranks", ())) == tuple(ranks)]
    if runs:
      row = _row(runs, scales, method, micro, ranks)
      row["accuracy_delta"] = round(
          row["accuracy_mean"] - baseline["accuracy_mean"], 3)
      rows.append(row)
  as_rows = [r for r in rows if r["method"].split(",")[0] == "AS"]
  points = settings["accuracy_points"]
  limits = {r["S"]: (r["updates"], 2 * T / int(r["S"])) for r in as_rows
            if not r["elastic"] and int(r["S"]) <= settings["updates_limit_S"]}
  target = {
      "accuracy_points": points,
      "as_accuracy_within": {
          r["S"] + r["method"][2:]: abs(r["accuracy_delta"]) <= points
          for r in as_rows},
      "updates_limit_S": settings["updates_limit_S"],
      "as_updates_within": {s: u <= limit for s, (u, limit) in limits.items()},
      "as_updates_limits": {s: round(limit, 1)
                            for s, (_, limit) in limits.items()}}
  target["met"] = bool(as_rows) and all(
      target["as_accuracy_within"].values()) and all(
          target["as_updates_within"].values())
  return {"model": settings["model"], "T": T,
          "baseline": {k: baseline[k] for k in (
              "accuracy_mean", "accuracy_std", "train_loss", "updates",
              "wall_seconds")},
          "rows": rows, "target": target,
          "settings": {k: v for k, v in settings.items()
                       if k not in ("model", "T")}}


def _quiet():
  """Keeps a pool worker's output to the study's own progress lines."""
  import warnings  # pylint: disable=g-import-not-at-top
  warnings.filterwarnings("ignore")
  from absl import logging  # pylint: disable=g-import-not-at-top
  logging.set_verbosity(logging.ERROR)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.get_logger().setLevel("ERROR")


def _trace_hook(every, points):
  """A hook that appends AdaScale's (tau, gain) to `points` every `every`
  updates, and keeps the final global_step and tau.

  It reads in a session run of its own, after the update: a fetch in the
  update's own run may see the state from before or after the assigns.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import estimator_scale as es  # pylint: disable=g-import-not-at-top

  class TraceHook(tf.compat.v1.train.SessionRunHook):

    def begin(self):
      variables = {v.op.name: v for v in tf.compat.v1.global_variables()}
      self._fetch = {"updates": tf.compat.v1.train.get_global_step()}
      for name, variable in (("gain", es.ADASCALE_GAIN),
                             ("progress", es.ADASCALE_PROGRESS)):
        if variable in variables:
          self._fetch[name] = variables[variable].read_value()
      self.final, self._runs = None, 0

    def after_run(self, run_context, run_values):
      self._runs += 1
      if "gain" in self._fetch and (self._runs - 1) % every == 0:
        state = run_context.session.run(self._fetch)
        points.append((float(state["progress"]), float(state["gain"])))

    def end(self, session):
      self.final = {k: float(v) for k, v in session.run(self._fetch).items()}
  return TraceHook()


def _train_split_input(es, batch_size):
  """One ordered pass over the training split, for the final training loss."""
  from model_zoo import digits_data  # pylint: disable=g-import-not-at-top
  return es.inputs.from_tfrecords(
      digits_data.tfrecord_pattern("train"), digits_data.FEATURE_SPEC, "label",
      batch_size, training=False)


def _rank_scales(ranks):
  return tuple(RANK_ACCUMULATION * r for r in ranks)


def _estimator(es, spec, segment, model_dir):
  """The Estimator of one segment, in `model_dir`."""
  from estimator_scale import registry  # pylint: disable=g-import-not-at-top
  config = es.TrainingConfig(
      optimizer=segment["optimizer"],
      schedule=es.Schedule(**segment["schedule"]),
      accumulation_steps=segment["accumulation_steps"],
      lr_scaling=segment["lr_scaling"],
      scaling_warmup_updates=segment["warmup"],
      adascale_smoothing=(spec["adascale_smoothing"]
                          if segment["lr_scaling"] == "adascale" else None),
      optimizer_options=tuple(tuple(o) for o in segment["optimizer_options"]))
  return es.make_estimator(
      registry.get(spec["model"]), model_dir=model_dir,
      distribution=segment["distribution"], training_config=config,
      hparams={"data_seed": spec["seed"]}, random_seed=spec["seed"],
      scale_invariant_steps=segment["tau"], intra_op_threads=spec["threads"],
      save_checkpoints_steps=NEVER, save_summary_steps=NEVER,
      log_step_count_steps=NEVER)


def _train_segment(es, spec, segment, model_dir, points):
  """Trains one segment in `model_dir`, continuing from its checkpoint."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  estimator = _estimator(es, spec, segment, model_dir)
  trace = _trace_hook(segment["trace_every"], points)
  estimator.train(
      estimator.model_input_fn(tf.estimator.ModeKeys.TRAIN,
                               spec["micro_batch_size"] * segment["scale"]),
      hooks=[trace], max_steps=segment["max_updates"])
  return estimator, trace.final


def _train_segment_on_ranks(spec, segment, model_dir, points):
  """Trains one segment as a horovodrun job of `segment["ranks"]` ranks on
  this host (`main` with --segment, on each rank); returns its final state.

  Each job starts from the previous one's checkpoint with its own number of
  ranks, as an elastic Horovod job does after a change, and its ranks share
  the segment's S. Rank 0 hands back the trace through a file.
  """
  import subprocess  # pylint: disable=g-import-not-at-top
  job = os.path.join(model_dir, "segment.json")
  with open(job, "w", encoding="utf-8") as f:
    json.dump({"spec": spec, "segment": segment, "model_dir": model_dir}, f)
  ranks = segment["ranks"]
  horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
  proc = subprocess.run(
      [horovodrun, "--gloo", "-np", str(ranks), "-H", f"localhost:{ranks}",
       sys.executable, os.path.abspath(__file__), "--segment", job],
      cwd=ROOT, capture_output=True, text=True, check=False)
  if proc.returncode != 0:
    raise RuntimeError(f"segment on {ranks} ranks failed:\n"
                       f"{(proc.stdout + proc.stderr)[-4000:]}")
  with open(job + ".out", encoding="utf-8") as f:
    result = json.load(f)
  points.extend(tuple(p) for p in result["points"])
  return result["final"]


def train_segment_job(path):
  """One rank of `_train_segment_on_ranks`'s horovodrun job."""
  import estimator_scale as es  # pylint: disable=g-import-not-at-top
  from estimator_scale import registry  # pylint: disable=g-import-not-at-top
  registry.load_module("model_zoo")
  _quiet()
  with open(path, encoding="utf-8") as f:
    job = json.load(f)
  points = []
  estimator, final = _train_segment(es, job["spec"], job["segment"],
                                    job["model_dir"], points)
  if estimator.topology.is_chief:
    with open(path + ".out", "w", encoding="utf-8") as f:
      json.dump({"points": points, "final": final}, f)


def train_run(spec):
  """Trains and evaluates one run; returns its result (a plain dict)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import estimator_scale as es  # pylint: disable=g-import-not-at-top
  from estimator_scale import registry  # pylint: disable=g-import-not-at-top
  registry.load_module("model_zoo")
  _quiet()
  model_dir = tempfile.mkdtemp(prefix="adascale-study-")
  points, wall = [], 0.0
  try:
    for segment in spec["segments"]:
      start = time.time()
      if segment.get("ranks"):
        final = _train_segment_on_ranks(spec, segment, model_dir, points)
        # Evaluated here, on one process, from the last job's checkpoint.
        estimator = _estimator(es, spec, dict(
            segment, distribution="none",
            accumulation_steps=segment["scale"]), model_dir)
      else:
        estimator, final = _train_segment(es, spec, segment, model_dir,
                                          points)
      wall += time.time() - start
    test = estimator.evaluate(
        estimator.model_input_fn(tf.estimator.ModeKeys.EVAL, 512))
    train = estimator.evaluate(_train_split_input(es, 512), name="train")
  finally:
    shutil.rmtree(model_dir, ignore_errors=True)
  schedule = spec["segments"][0]["schedule"]
  return dict(
      model=spec["model"], method=spec["method"], scales=spec["scales"],
      ranks=spec["ranks"], seed=spec["seed"],
      accuracy=100.0 * float(test["accuracy"]),
      test_loss=float(test["loss"]), train_loss=float(train["loss"]),
      updates=int(final["updates"]), tau=final.get("progress"),
      wall_seconds=wall,
      trace=[(tau, gain, adascale_lr(
          gain, tau, schedule["learning_rate"], schedule.get("boundaries", ()),
          schedule.get("decay_rate", 1.0))) for tau, gain in points])


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


def _expected_seconds(spec):
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


def _log(done, total, r, started):
  tau = f", tau {r['tau']:.0f}" if r["tau"] is not None else ""
  ranks = f" ranks={scale_label(r['ranks'])}" if r.get("ranks") else ""
  print(f"[{done}/{total} {time.time() - started:4.0f}s] {r['model']} "
        f"{r['method']:8s} S={scale_label(r['scales']):9s}{ranks} "
        f"seed={r['seed']}: "
        f"accuracy {r['accuracy']:.2f}%, train loss {r['train_loss']:.2e}, "
        f"{r['updates']} updates{tau}, {r['wall_seconds']:.1f}s", flush=True)


def _run_all(specs, pool, log_from=None):
  """Results of `specs`, from the pool (or this process when it is None)."""
  specs = sorted(specs, key=_expected_seconds, reverse=True)
  results = []
  for result in (pool.imap_unordered(train_run, specs) if pool else
                 map(train_run, specs)):
    results.append(result)
    if log_from is not None:
      _log(len(results), len(specs), result, log_from)
  return results


def _horovod_topology():
  """(ranks, is_chief) when horovodrun started us, else (1, True)."""
  from estimator_scale.backends import horovod  # pylint: disable=g-import-not-at-top
  if not horovod.launched():
    return 1, True
  hvd = horovod.import_horovod()
  hvd.init()
  return hvd.size(), hvd.rank() == 0


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
      specs += run_specs(settings, method, _rank_scales(ranks),
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


def traces_of(results):
  """AdaScale's sampled (tau, gain, lr) per run, for plots and re-plots."""
  return [{"model": r["model"], "S": scale_label(r["scales"]),
           "seed": r["seed"],
           "points": [[round(v, 6) for v in p] for p in r["trace"]]}
          for r in sorted(results, key=lambda r: (
              r["model"], len(r["scales"]), r["scales"], r["seed"]))
          if r["method"] == "AS" and not r.get("ranks")]


def write_outputs(out_dir, study, traces):
  """study.json and traces.json, then the renderings of them."""
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, "study.json"), "w", encoding="utf-8") as f:
    json.dump(study, f, indent=1)
  with open(os.path.join(out_dir, "traces.json"), "w", encoding="utf-8") as f:
    json.dump(traces, f, separators=(",", ":"))
  return [os.path.join(out_dir, n) for n in ("study.json", "traces.json")] + (
      study_plots.render(study, traces, out_dir))


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out_dir", default="docs/adascale")
  parser.add_argument("--tasks", nargs="+", default=list(TASKS),
                      choices=list(TASKS))
  parser.add_argument("--steps", type=int, default=None,
                      help="T for every task (default: each task's own).")
  parser.add_argument("--learning_rate", type=float, default=None,
                      help="S = 1 rate for every task (default: each own).")
  parser.add_argument("--scales", type=int, nargs="+",
                      default=[1, 2, 4, 8, 16, 32, 64, 128])
  parser.add_argument("--no_elastic", action="store_true",
                      help="Skip the elastic rows.")
  parser.add_argument("--rank_elastic", action="store_true",
                      help="Add digits_mlp's rank-elastic rows: AS and LSW "
                      "on 1 -> 2 -> 4 and 4 -> 2 -> 1 Horovod ranks, one "
                      "horovodrun job per third of T.")
  parser.add_argument("--segment", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--seeds", type=int, default=3)
  parser.add_argument("--micro_batch_size", type=int, default=None,
                      help="Examples per gradient sample (S of them/update; "
                      "default: each task's own).")
  parser.add_argument("--momentum", type=float, default=0.9)
  parser.add_argument("--decay_fractions", type=float, nargs="+",
                      default=[0.5, 0.75])
  parser.add_argument("--decay_rate", type=float, default=0.1)
  parser.add_argument("--warmup_fraction", type=float, default=0.055)
  parser.add_argument("--lars_trust_coefficient", type=float, default=0.02)
  parser.add_argument("--lars_power", type=float, default=2.0,
                      help="LARS's polynomial decay exponent.")
  parser.add_argument("--processes", type=int,
                      default=min(2, os.cpu_count() or 1),
                      help="Worker processes (ignored under Horovod).")
  parser.add_argument("--threads", type=int, default=1, help="intra-op")
  args = parser.parse_args(argv)
  if any(s < 1 for s in args.scales):
    parser.error(f"--scales must all be >= 1, got {args.scales}")
  for name in ("seeds", "steps", "processes", "threads", "micro_batch_size"):
    value = getattr(args, name)
    if value is not None and value < 1:
      parser.error(f"--{name} must be >= 1, got {value}")
  return args


def main(argv=None):
  args = parse_args(argv)
  if args.segment:  # a rank of a rank-elastic run's segment
    train_segment_job(args.segment)
    return
  workers, is_chief = _horovod_topology()
  tasks = [task_settings(args, model, workers) for model in args.tasks]
  started = time.time()
  pool = None if workers > 1 else multiprocessing.get_context("spawn").Pool(
      args.processes, initializer=_quiet)
  try:
    log_from = started if is_chief else None
    results = run_study(tasks, lambda specs: _run_all(specs, pool, log_from),
                        workers)
  finally:
    if pool is not None:
      pool.close()
      pool.join()
  if is_chief:
    study = {"tasks": [build_table(results, t) for t in tasks],
             "study_wall_seconds": round(time.time() - started, 1),
             "processes": 1 if workers > 1 else args.processes,
             "workers": workers}
    paths = write_outputs(args.out_dir, study, traces_of(results))
    print(study_plots.markdown(study) + "\nwrote " + ", ".join(paths))


if __name__ == "__main__":
  main()

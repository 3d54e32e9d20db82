"""AdaScale against linear scaling with warm-up over scales S = 1..32.

  python tools/adascale_study.py --out_dir docs/adascale           # make study
  horovodrun -np 2 -H localhost:2 python tools/adascale_study.py ...

A small-scale replay of Table 2 of Johnson et al. (AdaScale SGD, ICML 2020)
on a model_zoo model. S is the number of gradient samples of
`--micro_batch_size` examples that one update averages: accumulation steps on
one process, or workers x accumulation steps under Horovod. Per scale:

  baseline  S = 1: T updates of momentum SGD, step decay at 50% and 75% of T;
  AS        AdaScale, stopped once its progress tau reaches T (the same
            schedule, read at floor(tau));
  LSW       lr x S, warm-up over the first 5.5% of ceil(T/S) updates, decay
            boundaries moved to the same fractions of ceil(T/S);
  LSW+      LSW stretched to as many updates as AS took (mean over seeds).

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

METHODS = ("AS", "LSW", "LSW+")
RULES = {"baseline": "identity", "AS": "adascale"}  # LSW, LSW+: linear
MODELS = ("digits_mlp", "digits_cnn")
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


def run_specs(settings, method, scale, as_updates=None, workers=1):
  """One spec (a plain dict, so a worker process can take it) per seed.

  `as_updates` (LSW+ only) is the mean number of updates AS took at this S.
  Under Horovod, S that the ranks divide is spread over them; the rest (the
  baseline too) runs whole on every rank, which is redundant but needs no
  coordination.
  """
  T, fractions = settings["T"], settings["decay_fractions"]
  if method in ("baseline", "AS"):
    updates, boundaries = T, decay_boundaries(T, fractions)
  else:
    updates = math.ceil(T / scale) if method == "LSW" else int(as_updates)
    boundaries = decay_boundaries(updates, fractions)
  spread = workers > 1 and scale >= workers and scale % workers == 0
  spec = dict(
      method=method, scale=scale, max_updates=updates, boundaries=boundaries,
      lr_scaling=RULES.get(method, "linear"),
      warmup=(warmup_updates(updates, settings["warmup_fraction"])
              if method in ("LSW", "LSW+") and scale > 1 else 0),
      distribution="horovod" if spread else "none",
      accumulation_steps=scale // workers if spread else scale,
      trace_every=max(1, math.ceil(T / scale / TRACE_POINTS)))
  return [dict(settings, seed=seed, **spec)
          for seed in range(settings["seeds"])]


def mean_std(values):
  """Mean and sample standard deviation (0 for a single value)."""
  values = [float(v) for v in values]
  return statistics.fmean(values), (
      statistics.stdev(values) if len(values) > 1 else 0.0)


def _row(runs, scale, method, micro_batch_size):
  accuracy, accuracy_std = mean_std(r["accuracy"] for r in runs)
  mean = lambda key: mean_std(r[key] for r in runs)[0]
  return {"S": scale, "method": method,
          "total_batch": scale * micro_batch_size,
          "accuracy_mean": round(accuracy, 3),
          "accuracy_std": round(accuracy_std, 3),
          "train_loss": float(f"{mean('train_loss'):.4g}"),
          "updates": round(mean("updates"), 1),
          "wall_seconds": round(mean("wall_seconds"), 2), "seeds": len(runs)}


def build_table(results, settings):
  """The study's JSON object from the runs' results.

  Accuracies are in percent of the test split; losses, updates and wall
  times are means over seeds. `target` records the issue's criterion: AS
  within `accuracy_points` of the baseline at every S, and at the largest S
  at most twice the T/S updates of perfect scaling.
  """
  micro = settings["micro_batch_size"]
  baseline_runs = [r for r in results if r["method"] == "baseline"]
  baseline = _row(baseline_runs, 1, "baseline", micro)
  rows = []
  for scale in settings["scales"]:
    for method in METHODS:
      runs = [r for r in results
              if r["method"] == method and r["scale"] == scale]
      if runs:
        row = _row(runs, scale, method, micro)
        row["accuracy_delta"] = round(
            row["accuracy_mean"] - baseline["accuracy_mean"], 3)
        rows.append(row)
  as_rows = [r for r in rows if r["method"] == "AS"]
  points = settings["accuracy_points"]
  largest = max(as_rows, key=lambda r: r["S"]) if as_rows else None
  limit = 2 * settings["T"] / largest["S"] if largest else None
  target = {
      "accuracy_points": points,
      "as_accuracy_within": {str(r["S"]): abs(r["accuracy_delta"]) <= points
                             for r in as_rows},
      "largest_S": largest and largest["S"], "as_updates_limit": limit,
      "as_updates_at_largest_S": largest and largest["updates"]}
  target["met"] = bool(as_rows) and all(
      target["as_accuracy_within"].values()) and largest["updates"] <= limit
  return {"model": settings["model"], "T": settings["T"],
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


def _trace_hook(every):
  """A hook that samples AdaScale's gain and tau after every `every` updates.

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
      self.points, self.final, self._runs = [], None, 0

    def after_run(self, run_context, run_values):
      self._runs += 1
      if "gain" in self._fetch and (self._runs - 1) % every == 0:
        state = run_context.session.run(self._fetch)
        self.points.append((float(state["progress"]), float(state["gain"])))

    def end(self, session):
      self.final = {k: float(v) for k, v in session.run(self._fetch).items()}
  return TraceHook()


def _train_split_input(es, batch_size):
  """One ordered pass over the training split, for the final training loss."""
  from model_zoo import digits_data  # pylint: disable=g-import-not-at-top
  return es.inputs.from_tfrecords(
      digits_data.tfrecord_pattern("train"), digits_data.FEATURE_SPEC, "label",
      batch_size, training=False)


def train_run(spec):
  """Trains and evaluates one run; returns its result (a plain dict)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import estimator_scale as es  # pylint: disable=g-import-not-at-top
  from estimator_scale import registry  # pylint: disable=g-import-not-at-top
  registry.load_module("model_zoo")
  _quiet()
  schedule = es.Schedule(name="piecewise", learning_rate=spec["learning_rate"],
                         boundaries=spec["boundaries"],
                         decay_rate=spec["decay_rate"])
  config = es.TrainingConfig(
      optimizer="momentum", schedule=schedule,
      accumulation_steps=spec["accumulation_steps"],
      lr_scaling=spec["lr_scaling"], scaling_warmup_updates=spec["warmup"],
      optimizer_options=(("momentum", spec["momentum"]),))
  adascale = spec["method"] == "AS"
  model_dir = tempfile.mkdtemp(prefix="adascale-study-")
  try:
    estimator = es.make_estimator(
        registry.get(spec["model"]), model_dir=model_dir,
        distribution=spec["distribution"], training_config=config,
        hparams={"data_seed": spec["seed"]}, random_seed=spec["seed"],
        scale_invariant_steps=spec["T"] if adascale else None,
        intra_op_threads=spec["threads"], save_checkpoints_steps=NEVER,
        save_summary_steps=NEVER, log_step_count_steps=NEVER)
    trace = _trace_hook(spec["trace_every"])
    start = time.time()
    estimator.train(
        estimator.model_input_fn(tf.estimator.ModeKeys.TRAIN,
                                 spec["micro_batch_size"] * spec["scale"]),
        hooks=[trace], max_steps=spec["max_updates"])
    wall = time.time() - start
    test = estimator.evaluate(
        estimator.model_input_fn(tf.estimator.ModeKeys.EVAL, 512))
    train = estimator.evaluate(_train_split_input(es, 512), name="train")
  finally:
    shutil.rmtree(model_dir, ignore_errors=True)
  return dict(
      method=spec["method"], scale=spec["scale"], seed=spec["seed"],
      accuracy=100.0 * float(test["accuracy"]), test_loss=float(test["loss"]),
      train_loss=float(train["loss"]), updates=int(trace.final["updates"]),
      tau=trace.final.get("progress"), wall_seconds=wall,
      trace=[(tau, gain, adascale_lr(gain, tau, spec["learning_rate"],
                                     spec["boundaries"], spec["decay_rate"]))
             for tau, gain in trace.points])


def _settings(args, workers):
  settings = {k: v for k, v in vars(args).items()
              if k not in ("out_dir", "steps", "processes")}
  return dict(settings, T=args.steps, accuracy_points=1.0, workers=workers,
              decay_fractions=tuple(args.decay_fractions))


def _expected_cost(spec):  # session runs dominate: most updates first
  return -spec["max_updates"] / (2.0 if spec["method"] == "AS" else 1.0)


def _log(done, total, r, started):
  tau = f", tau {r['tau']:.0f}" if r["tau"] is not None else ""
  print(f"[{done}/{total} {time.time() - started:4.0f}s] {r['method']:8s} "
        f"S={r['scale']:<3d} seed={r['seed']}: accuracy {r['accuracy']:.2f}%,"
        f" train loss {r['train_loss']:.2e}, {r['updates']} updates{tau}, "
        f"{r['wall_seconds']:.1f}s", flush=True)


def _run_all(specs, pool, log_from=None):
  """Results of `specs`, from the pool (or this process when it is None)."""
  specs = sorted(specs, key=_expected_cost)
  results = []
  for result in (pool.imap_unordered(train_run, specs) if pool else
                 map(train_run, specs)):
    results.append(result)
    if log_from is not None:
      _log(len(results), len(specs), result, log_from)
  return results


def _horovod_topology():
  """(ranks, is_chief) when horovodrun started us, else (1, True)."""
  from estimator_scale import topology  # pylint: disable=g-import-not-at-top
  if not topology.horovod_launched():
    return 1, True
  import horovod.tensorflow as hvd  # pylint: disable=g-import-not-at-top
  hvd.init()
  found = topology.from_horovod(hvd)
  return found.num_workers, found.is_chief


def run_study(settings, run, workers=1):
  """All runs of the study; LSW+ after AS, whose update counts it needs."""
  first = run_specs(settings, "baseline", 1, workers=workers)
  for scale in settings["scales"]:
    for method in ("AS", "LSW"):
      first += run_specs(settings, method, scale, workers=workers)
  results = run(first)
  second = []
  for scale in settings["scales"]:
    taken = [r["updates"] for r in results
             if r["method"] == "AS" and r["scale"] == scale]
    second += run_specs(settings, "LSW+", scale,
                        as_updates=round(statistics.fmean(taken)),
                        workers=workers)
  return results + run(second)


def traces_of(results):
  """AdaScale's sampled (tau, gain, lr) per run, for plots and re-plots."""
  return [{"S": r["scale"], "seed": r["seed"],
           "points": [[round(v, 6) for v in p] for p in r["trace"]]}
          for r in sorted(results, key=lambda r: (r["scale"], r["seed"]))
          if r["method"] == "AS"]


def write_outputs(out_dir, table, traces):
  """study.json and traces.json, then the renderings of them."""
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, "study.json"), "w", encoding="utf-8") as f:
    json.dump(table, f, indent=1)
  with open(os.path.join(out_dir, "traces.json"), "w", encoding="utf-8") as f:
    json.dump(traces, f, separators=(",", ":"))
  return [os.path.join(out_dir, n) for n in ("study.json", "traces.json")] + (
      study_plots.render(table, traces, out_dir))


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out_dir", default="docs/adascale")
  parser.add_argument("--model", default="digits_mlp", choices=MODELS)
  parser.add_argument("--steps", type=int, default=20000,
                      help="T: the baseline's updates and AS's target tau.")
  parser.add_argument("--scales", type=int, nargs="+",
                      default=[1, 2, 4, 8, 16, 32])
  parser.add_argument("--seeds", type=int, default=3)
  parser.add_argument("--micro_batch_size", type=int, default=8,
                      help="Examples per gradient sample (S of them/update).")
  parser.add_argument("--learning_rate", type=float, default=0.05)
  parser.add_argument("--momentum", type=float, default=0.9)
  parser.add_argument("--decay_fractions", type=float, nargs="+",
                      default=[0.5, 0.75])
  parser.add_argument("--decay_rate", type=float, default=0.1)
  parser.add_argument("--warmup_fraction", type=float, default=0.055)
  parser.add_argument("--processes", type=int,
                      default=min(2, os.cpu_count() or 1),
                      help="Worker processes (ignored under Horovod).")
  parser.add_argument("--threads", type=int, default=1, help="intra-op")
  args = parser.parse_args(argv)
  if any(s < 1 for s in args.scales) or args.seeds < 1 or args.steps < 1:
    parser.error("--scales, --seeds and --steps must be >= 1")
  return args


def main(argv=None):
  args = parse_args(argv)
  workers, is_chief = _horovod_topology()
  settings = _settings(args, workers)
  started = time.time()
  pool = None if workers > 1 else multiprocessing.get_context("spawn").Pool(
      args.processes, initializer=_quiet)
  try:
    log_from = started if is_chief else None
    results = run_study(
        settings, lambda specs: _run_all(specs, pool, log_from), workers)
  finally:
    if pool is not None:
      pool.close()
      pool.join()
  settings["study_wall_seconds"] = round(time.time() - started, 1)
  if is_chief:
    table = build_table(results, settings)
    paths = write_outputs(args.out_dir, table, traces_of(results))
    print(study_plots.markdown(table) + "\nwrote " + ", ".join(paths))


if __name__ == "__main__":
  main()

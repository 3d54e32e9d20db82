"""Weak-scaling rows over shaped links: 2 hosts x 1 rank against 1 process.

Each round measures, per model, one process on a rig host (the baseline)
and each of the four ways of exchanging gradients (VARIANTS) at every link
rate, so a row's per-round ratio divides two measurements of the same
round. A variant's rates are windows of one process tree, the links
reshaped between them (tools/bench/perf/windows.py): a 2-host job takes
longer to start than a window lasts. Every process runs one intra- and one
inter-op thread, so a host is one core's compute, as in
docs/BENCH.md's rows 4.

A window is sized in updates, but the same number of updates takes ten
times longer at 100 Mbit/s than unshaped: steps come from
scaling_model.py's prediction of each window's update time, from this
round's baseline compute and the link calibration, so that each window
lasts about `window_s` whatever the link; the results record the window
each measurement really had.

The baseline runs before the first variant and again after each one, and
the round's baseline is the mean of those runs: one process's rate scatters
from run to run on this virtual machine (the wide MLP's by up to ten per
cent either way, with no trend through a round in the two runs that took
five), while a network-bound 2-host rate hardly moves, so a row's ratio is
only as steady as its baseline, and five runs spread over the round steady
it more than the two nearest the variant; the model's compute is that same
mean.

Two more kinds of measurement per round and model feed the model rather
than the rows. One
process runs again at IN_JOB_K micro-batches per update, which splits its
time into compute per micro-batch and an apply paid once per update
(scaling_model.split_apply): accumulation saves that apply as well as
exchanges. And the compute a rank has inside a 2-host job is measured in
one, per kind of exchange (IN_JOB_VARIANTS), at IN_JOB_K on the unshaped
link, where the exchange is a few per cent of an update: against the lone
process at the same k it gives the job's slowdown. On the rig two hosts
share the machine's two cores with nothing to spare, so a rank's core also
runs the job's other threads (Horovod's background thread wakes every
cycle whether or not a tensor is ready; tf.distribute's collectives have
none such); a real host has cores for them. That compute, not the lone
process's, is what the model's `compute` stands for in these rows.
"""
import dataclasses
import functools
import math
import tempfile
import threading

from tools.bench.network import analysis
from tools.bench.network import links
from tools.bench.network import scaling_model
from tools.bench.perf import runner
from tools.bench.perf import windows

MICRO_BATCH = 32
K = 4
IN_JOB_K = 16
MODELS = {"resnet20": "resnet20", "wide_mlp": "bench_wide_mlp"}
# name -> (launcher, worker.py flags, the model's Recipe for it).
VARIANTS = {
    "horovod": ("horovodrun", dict(distribution="horovod"),
                scaling_model.Recipe()),
    "horovod_fp16": ("horovodrun", dict(distribution="horovod",
                                        allreduce_compression="fp16"),
                     scaling_model.Recipe(compression=0.5)),
    f"horovod_k{K}": ("horovodrun", dict(distribution="horovod",
                                         accumulation_steps=K),
                      scaling_model.Recipe(accumulation_steps=K)),
    "multi_worker_mirrored": ("launch",
                              dict(distribution="multi_worker_mirrored"),
                              scaling_model.Recipe(exchange="collective")),
}
# The variant whose job measures a rank's compute, per kind of exchange
# (Recipe.exchange).
IN_JOB_VARIANTS = {"horovod": "horovod",
                   "collective": "multi_worker_mirrored"}
HOSTS = 2
WARMUP = 5
# Untimed updates on a freshly reshaped link before its window.
REWARM = 2
# Predicted windows are stretched by this much: the model may be
# optimistic, and a window must not fall under window_s.
MARGIN = 1.25
# Seconds a measurement may take beyond twice its predicted updates'
# time (process start, graph build, broadcast, exit), before it is stopped
# as failed. A multi_worker_mirrored chief whose peer exited first waits
# for TensorFlow's coordination service to time the peer's heartbeat out
# before it exits itself.
START_ALLOWANCE_S = 240
SIZING_STEPS = 20
SIZING_LIMIT_S = 60


def recipe(variant, calibration):
  """The variant's Recipe, with what the allreduce-only runs measured of
  its kind of exchange (analysis.calibration)."""
  base = VARIANTS[variant][2]
  if base.exchange == "collective":
    return dataclasses.replace(
        base, overhead_s=calibration.get("collective_overhead_s", 0.0),
        cpu_s_per_byte=calibration.get("collective_cpu_s_per_byte", 0.0))
  recipe = dataclasses.replace(base, overhead_s=calibration["overhead_s"])
  if base.compression < 1:
    return analysis.fp16_recipe(recipe, calibration)
  return recipe


def _flags(model, variant, steps):
  flags = dict(model=MODELS[model], kind="ours", threads=1, warmup=WARMUP,
               steps=steps, batch=MICRO_BATCH)
  if variant is not None:
    flags.update(VARIANTS[variant][1])
  flags["batch"] = MICRO_BATCH * flags.get("accumulation_steps", 1)
  return flags


def _steps(update_s, window_s):
  return max(3, math.ceil(window_s * MARGIN / update_s))


class Rounds:
  """The measurements of one bench run, kept as the JSON stores them."""

  def __init__(self, cluster, models, rates, recipes, window_s, calibration,
               gradient_bytes, log_dir):
    """recipes: {variant: Recipe}; calibration: analysis.calibration's."""
    self.cluster, self.models, self.rates = cluster, models, rates
    self.recipes, self.window_s, self.log_dir = recipes, window_s, log_dir
    self.calibration = calibration
    self.gradient_bytes = gradient_bytes
    self.compute_s = {}  # per micro-batch, the fastest baseline so far
    self.samples = {m: {"single": [], "single_k": [],
                        "in_job": {e: [] for e in self._exchanges()},
                        "rows": {r: {v: [] for v in recipes} for r in rates}}
                    for m in models}

  def _exchanges(self):
    return sorted({r.exchange for r in self.recipes.values()})

  def _measure(self, name, launcher, flags, predicted_s, hosts=None):
    """One measurement; `predicted_s` (its updates' time) sets its limit."""
    spec = (launcher, len(hosts) if hosts else 1, flags)
    timeout = START_ALLOWANCE_S + 2 * predicted_s
    result = runner.run_measurement(name, spec, self.log_dir,
                                    timeout=int(timeout),
                                    host=self.cluster.hosts[0], hosts=hosts)
    shown = "failed" if result is None else (
        f"{result['examples_per_sec']:.0f} ex/s over {result['seconds']:.1f} s")
    print(f"  {name}: {shown}", flush=True)
    if result is not None:
      result["steps"] = flags["steps"]
    return result

  def _size(self, model):
    """A first estimate of the model's compute, before round 1."""
    result = self._measure(f"{model}-sizing", "python",
                           _flags(model, None, SIZING_STEPS), SIZING_LIMIT_S)
    if result is None:
      raise RuntimeError(f"the sizing run of {model} failed; see its log in "
                         f"{self.log_dir}")
    self.compute_s[model] = MICRO_BATCH / result["examples_per_sec"]

  def _measure_rates(self, model, variant, recipe, names):
    """One process tree for `variant`, a window per rate; their results."""
    compute = self.compute_s[model]
    updates = [scaling_model.update_seconds(
        compute, self.gradient_bytes[model], HOSTS,
        links.link(rate, self.calibration["latency_s"],
                   self.calibration["unshaped_bandwidth"]), recipe)
               for rate in self.rates]
    steps = [_steps(u, self.window_s) for u in updates]
    pause_dir = tempfile.mkdtemp(prefix="pauses-", dir=self.log_dir)
    flags = _flags(model, variant, sum(steps))
    flags.update(windows=",".join(map(str, steps)), rewarm=REWARM,
                 pause_dir=pause_dir)
    done = threading.Event()

    def reshape():
      for index, rate in enumerate(self.rates[1:]):
        if not windows.wait_and_release(
            pause_dir, index, HOSTS,
            functools.partial(links.shape, self.cluster, rate), done.is_set):
          return

    links.shape(self.cluster, self.rates[0])
    thread = threading.Thread(target=reshape, daemon=True)
    thread.start()
    predicted = (updates[0] * WARMUP +
                 sum(u * (n + REWARM) for u, n in zip(updates, steps)))
    try:
      result = self._measure(f"{model}-{variant}", VARIANTS[variant][0],
                             flags, predicted, names)
    finally:
      done.set()
      thread.join()
      links.shape(self.cluster, "unshaped")
    if result is None:
      return [None] * len(self.rates)
    return [dict(w, steps=n) for w, n in zip(result["windows"], steps)]

  def _single(self, model, k=1):
    """One process at k micro-batches per update (the baseline at k = 1)."""
    compute = self.compute_s[model]
    steps = _steps(k * compute, self.window_s)
    flags = _flags(model, None, steps)
    flags.update(accumulation_steps=k, batch=MICRO_BATCH * k)
    single = self._measure(f"{model}-single" + (f"-k{k}" if k > 1 else ""),
                           "python", flags, k * compute * (WARMUP + steps))
    if single is not None and k == 1:  # the fastest seen: a window may
      self.compute_s[model] = min(  # run long, never short, on a busy host
          compute, MICRO_BATCH / single["examples_per_sec"])
    if single is not None:
      single["accumulation_steps"] = k
    return single

  def _in_job(self, model, names, exchange):
    """A 2-host job at IN_JOB_K, unshaped: a rank's compute there."""
    variant = IN_JOB_VARIANTS[exchange]
    update = IN_JOB_K * self.compute_s[model]
    steps = _steps(update, self.window_s)
    flags = _flags(model, variant, steps)
    flags.update(accumulation_steps=IN_JOB_K, batch=MICRO_BATCH * IN_JOB_K)
    links.shape(self.cluster, "unshaped")
    result = self._measure(f"{model}-in_job-{variant}", VARIANTS[variant][0],
                           flags, update * (WARMUP + steps), names)
    if result is not None:
      result["accumulation_steps"] = IN_JOB_K
    return result

  def run_round(self):
    """Per model: one process at IN_JOB_K, the compute in a job per
    exchange, then the baseline before the first variant and after each,
    each variant over every link rate."""
    names = [h.name for h in self.cluster.hosts[:HOSTS]]
    for model in self.models:
      if model not in self.compute_s:
        self._size(model)
      samples = self.samples[model]
      samples["single_k"].append(self._single(model, IN_JOB_K))
      for exchange in self._exchanges():
        samples["in_job"][exchange].append(
            self._in_job(model, names, exchange))
      baselines = [self._single(model)]
      for variant, recipe in self.recipes.items():
        measured = self._measure_rates(model, variant, recipe, names)
        for rate, window in zip(self.rates, measured):
          samples["rows"][rate][variant].append(window)
          if window:
            print(f"    {rate}: {window['examples_per_sec']:.0f} ex/s over "
                  f"{window['seconds']:.1f} s", flush=True)
        baselines.append(self._single(model))
      samples["single"].append(bracketed(baselines, list(self.recipes)))


def bracketed(baselines, variants):
  """The round's baseline from runs before, between and after its
  variants (one more run than variants): their mean rate, each kept;
  None if any run failed."""
  if any(run is None for run in baselines):
    return None
  if len(baselines) != len(variants) + 1:
    raise ValueError(f"{len(baselines)} baseline runs for {len(variants)} "
                     "variants: need one before each and one after the last")
  rates = [run["examples_per_sec"] for run in baselines]
  return {"examples_per_sec": sum(rates) / len(rates),
          "seconds": min(run["seconds"] for run in baselines),
          "runs": rates}

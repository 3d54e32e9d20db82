"""Weak-scaling rows over shaped links: 2 hosts x 1 rank against 1 process.

Each round measures, per model, one process on a rig host (the baseline,
measured once per round and shared by every link rate of that round) and
then, for each link rate, the four ways of exchanging gradients (VARIANTS),
so a row's per-round ratio divides two measurements of the same round. Every
process runs one intra- and one inter-op thread, so a host is one core's
compute, as in docs/PERFORMANCE.md's rows 4.

A window is sized in updates, but the same number of updates takes ten
times longer at 100 Mbit/s than unshaped: steps come from
tools/scaling_model.py's prediction of each measurement's update time, from
this round's baseline compute and the link calibration, so that each window
lasts about `window_s` whatever the link; the results record the window
each measurement really had.
"""
import dataclasses
import math

from tools import scaling_model
from tools.bench import links
from tools.bench import runner

MICRO_BATCH = 32
K = 4
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
HOSTS = 2
WARMUP = 5
# Predicted windows are stretched by this much: the model may be
# optimistic, and a window must not fall under window_s.
MARGIN = 1.25
# Seconds a measurement may take beyond its predicted warm-up and window
# (process start, graph build, broadcast), before it is stopped as failed.
START_ALLOWANCE_S = 150
SIZING_STEPS = 20


def names_of(text, known, flag):
  """The `known` keys in a comma-separated `text`, checked, in known's order."""
  names = [n for n in text.split(",") if n]
  unknown = [n for n in names if n not in known]
  if unknown or not names:
    raise ValueError(f"{flag}={text!r}: expected some of {', '.join(known)}")
  return [n for n in known if n in names]


def recipe(variant, overhead_s):
  """The variant's Recipe, with the measured Horovod overhead if it has one."""
  base = VARIANTS[variant][2]
  if base.exchange != "horovod":
    return base
  return dataclasses.replace(base, overhead_s=overhead_s)


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
    """recipes: {variant: Recipe}; calibration: network_allreduce's."""
    self.cluster, self.models, self.rates = cluster, models, rates
    self.recipes, self.window_s, self.log_dir = recipes, window_s, log_dir
    self.calibration = calibration
    self.gradient_bytes = gradient_bytes
    self.compute_s = {}  # per micro-batch, from the latest baseline
    self.samples = {m: {"single": [], "rows": {r: {v: [] for v in recipes}
                                               for r in rates}}
                    for m in models}

  def _measure(self, name, launcher, flags, predicted_s, hosts=None):
    spec = (launcher, len(hosts) if hosts else 1, flags)
    timeout = START_ALLOWANCE_S + 2 * predicted_s * (flags["warmup"] +
                                                     flags["steps"])
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
                           _flags(model, None, SIZING_STEPS), 1.0)
    if result is None:
      raise RuntimeError(f"the sizing run of {model} failed; see its log in "
                         f"{self.log_dir}")
    self.compute_s[model] = MICRO_BATCH / result["examples_per_sec"]

  def run_round(self):
    """Every model's baseline, then its variants at every link rate."""
    names = [h.name for h in self.cluster.hosts[:HOSTS]]
    for model in self.models:
      if model not in self.compute_s:
        self._size(model)
      compute = self.compute_s[model]
      single = self._measure(f"{model}-single", "python",
                             _flags(model, None, _steps(compute, self.window_s)),
                             compute)
      self.samples[model]["single"].append(single)
      if single is not None:
        self.compute_s[model] = compute = (MICRO_BATCH /
                                           single["examples_per_sec"])
      for rate in self.rates:
        links.shape(self.cluster, rate)
        link = links.link(rate, self.calibration["latency_s"],
                          self.calibration["unshaped_bandwidth"])
        for variant, recipe in self.recipes.items():
          update = scaling_model.update_seconds(
              compute, self.gradient_bytes[model], HOSTS, link, recipe)
          flags = _flags(model, variant, _steps(update, self.window_s))
          self.samples[model]["rows"][rate][variant].append(self._measure(
              f"{model}-{rate}-{variant}", VARIANTS[variant][0], flags,
              update, names))
      links.shape(self.cluster, "unshaped")

"""The figures docs/NETWORK.md's prose quotes, computed from the saved JSON.

The rule and the predictions' worked example are prose in
NETWORK.md.template, but every figure in them is the model's answer for
this run's calibration and compute, so a rerun rewrites them with the
tables. Each function returns the template's fields as text, "n/a" where
the JSON it needs is missing.
"""
import dataclasses

from tools.bench.network import analysis
from tools.bench.network import scaling_model

# The predictions' hosts and link rates per host (Gbit/s).
PREDICT_HOSTS = (8, 16, 32, 64, 128)
PREDICT_GBITS = (10, 100)
# The worked example: this model on the most hosts at the slowest link,
# accumulating until it reaches this efficiency.
EXAMPLE_MODEL = "resnet20"
EXAMPLE_EFFICIENCY = 0.9
_NA = "n/a"


def _significant(value, digits):
  """`value` rounded to `digits` significant figures."""
  return float(f"{value:.{digits}g}")


def _bandwidths(values, gbits):
  """Bandwidths (bytes/s) as the prose quotes them: MB/s to 2 figures and,
  where `gbits`, the Gbit/s those rounded figures make, e.g. 180-210 MB/s
  (1.4-1.7 Gbit/s); one figure where they round alike."""
  mbs = sorted({_significant(v / 1e6, 2) for v in values})
  ends = mbs[:1] if len(mbs) == 1 else [mbs[0], mbs[-1]]
  text = "-".join(f"{m:g}" for m in ends) + " MB/s"
  if gbits:
    text += " (" + "-".join(f"{m * 8 / 1e3:.2g}" for m in ends) + " Gbit/s)"
  return text


def rule_fields(fit, buffers, gbits=True):
  """The rule's figures: fp16's casts and sum per byte (`fit`, the allreduce
  runs' calibration) and the bandwidths below which it pays for the
  models' gradient `buffers` ({model: bytes}) on 2 hosts and on the most
  hosts predicted, in Gbit/s too where `gbits`. None: not measured."""
  if fit is None:
    return dict(fp16_cast_ns=_NA, fp16_sum_ns=_NA, fp16_pays_2=_NA,
                fp16_pays_many=_NA)
  plain = scaling_model.Recipe()
  fp16 = analysis.fp16_recipe(plain, fit)

  def pays(hosts):
    return _bandwidths([
        scaling_model.break_even_bandwidth(
            nbytes, hosts, plain, fp16,
            cpu_bandwidth=fit["unshaped_bandwidth"])
        for nbytes in buffers.values()], gbits)

  return dict(fp16_cast_ns=f"{fit['fp16_cast_s_per_byte'] * 1e9:.2f}",
              fp16_sum_ns=f"{fit['fp16_sum_s_per_byte'] * 1e9:.2f}",
              fp16_pays_2=pays(2), fp16_pays_many=pays(max(PREDICT_HOSTS)))


def _accumulation_for(compute_s, apply_s, nbytes, hosts, link, recipe):
  """The smallest k at which `recipe` reaches EXAMPLE_EFFICIENCY."""
  k = 1
  while scaling_model.efficiency(
      compute_s, nbytes, hosts, link,
      dataclasses.replace(recipe, accumulation_steps=k),
      apply_s=apply_s) < EXAMPLE_EFFICIENCY:
    k += 1
  return k


def example_fields(compute_s, apply_s, nbytes, recipe, micro_batch):
  """The worked example's figures: EXAMPLE_MODEL's GPU compute and apply
  per micro-batch (None: not measured), its gradient bytes, its Horovod
  `recipe` on a GPU host, on the most hosts at the slowest link."""
  hosts, gbits = max(PREDICT_HOSTS), min(PREDICT_GBITS)
  fields = dict(example_model=EXAMPLE_MODEL, example_hosts=hosts,
                example_gbits=f"{gbits:g}",
                example_target=f"{EXAMPLE_EFFICIENCY:.0%}".replace("%", " %"))
  names = ("r", "compute_ms", "wait_ms", "overhead_ms", "latency_ms", "steps",
           "data_ms", "k", "batches", "examples")
  if compute_s is None:
    return dict(fields, **{f"example_{n}": _NA for n in names})
  link = scaling_model.Link(scaling_model.goodput(gbits * 1e9),
                            scaling_model.DEFAULT_CLUSTER_LATENCY_S)
  exchange = scaling_model.exchange_seconds(nbytes, hosts, link, recipe)
  steps = 2 * (hosts - 1)
  # Two rings of latency: the negotiation's and the data's.
  latency = 2 * steps * link.latency
  data = exchange - recipe.cycle_s / 2 - recipe.overhead_s - latency
  k = _accumulation_for(compute_s, apply_s, nbytes, hosts, link, recipe)
  batches = k * hosts
  return dict(
      fields, example_r=f"{exchange / compute_s:.0f}",
      example_compute_ms=f"{compute_s * 1e3:.1f}",
      example_wait_ms=f"{recipe.cycle_s / 2 * 1e3:.1f}",
      example_overhead_ms=f"{recipe.overhead_s * 1e3:.1f}",
      example_latency_ms=f"{latency * 1e3:.1f}", example_steps=steps,
      example_data_ms=f"{data * 1e3:.1f}",
      example_k=k, example_batches=f"{_significant(batches, 2):,.0f}",
      example_examples=f"{_significant(batches * micro_batch, 3):,.0f}")


def prediction_fields(fit):
  """The predictions' fixed inputs: the cluster's step latency and cycle,
  and the fixed costs the allreduce runs measured (`fit`; None: not
  measured)."""
  fit = fit or {}

  def ms(key):
    return _NA if key not in fit else f"{fit[key] * 1e3:.1f}"

  return dict(
      cluster_latency_us=f"{scaling_model.DEFAULT_CLUSTER_LATENCY_S * 1e6:g}",
      cycle_ms=f"{scaling_model.DEFAULT_CYCLE_S * 1e3:g}",
      horovod_overhead_ms=ms("overhead_s"),
      collective_overhead_ms=ms("collective_overhead_s"),
      predict_gbits=" and ".join(f"{g:g}" for g in PREDICT_GBITS),
      first_hosts=min(PREDICT_HOSTS), last_hosts=max(PREDICT_HOSTS),
      gpu_speedup=scaling_model.GPU_SPEEDUP)

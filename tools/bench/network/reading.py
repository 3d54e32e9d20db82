"""The figures reading.md quotes, from the rows and the allreduce runs.

reading.md is what this run's rows say, written by reading them; the rows
and comparisons it points at are fixed in its prose, and every figure it
gives of them comes from here, so that the page cannot quote a figure its
tables do not show. render.py gives the rows and compute it computed from
results/rows.json; the allreduce runs' figures are analysis.py's.
"""
import math

from tools import repo
from tools.bench.network import analysis
from tools.bench.network import figures
from tools.bench.network import rows as network_rows
from tools.bench.network import scaling_model

MLP = "wide_mlp"
RESNET = "resnet20"
_NA = "n/a"


def _x(value):
  return f"{value:.2f}x"


def _range(values):
  return f"{min(values):.2f}-{max(values):.2f}"


def _percent_within(fractions):
  """The whole per cent that bounds every one of `fractions`."""
  return f"{math.ceil(max(fractions) * 100):.0f} %"


def _shown(value):
  """`value` as the tables print it: the reading's ratios and spreads are
  of the printed figures, so that a reader's check of them agrees."""
  return float(repo.fmt(value).replace(",", ""))


def _spread(values):
  """How far apart a row's per-round figures are."""
  shown = [_shown(v) for v in values]
  return max(shown) / min(shown) - 1


def _row_fields(table):
  """Ratios between the training rows' efficiencies and the model's."""
  eff = {(r["model"], r["rate"], r["variant"]): _shown(r["efficiency"])
         for r in table}

  def gain(model, rate, variant):
    return eff[model, rate, variant] / eff[model, rate, "horovod"]

  fields = {}
  for tag, model in (("resnet", RESNET), ("mlp", MLP)):
    fields.update({
        f"{tag}_slow_fp16_x": _x(gain(model, "100mbit", "horovod_fp16")),
        f"{tag}_slow_k_x": _x(
            gain(model, "100mbit", f"horovod_k{network_rows.K}")),
        f"{tag}_unshaped_fp16_x": _x(gain(model, "unshaped", "horovod_fp16")),
        f"{tag}_gbit_fp16_x": _x(gain(model, "1gbit", "horovod_fp16")),
        f"{tag}_slow_horovod": repo.fmt(eff[model, "100mbit", "horovod"]),
        f"{tag}_slow_mwms": repo.fmt(
            eff[model, "100mbit", "multi_worker_mirrored"])})
    ratios = [r["predicted"] / r["efficiency"] for r in table
              if r["model"] == model]
    fields[f"{tag}_model_range"] = _range(ratios)
  for variant in ("horovod_fp16", f"horovod_k{network_rows.K}"):
    fields[f"resnet_slow_{variant}"] = repo.fmt(
        eff[RESNET, "100mbit", variant])
  fields["mwms_within"] = _percent_within(
      abs(gain(m, "100mbit", "multi_worker_mirrored") - 1)
      for m in (RESNET, MLP))
  ratios = sorted((r["predicted"] / r["efficiency"] for r in table),
                  reverse=True)
  fields["highest_range"] = _range(ratios[:3])
  fields["fp16_model_range"] = _range(
      [r["predicted"] / r["efficiency"] for r in table
       if r["variant"] == "horovod_fp16"])
  fields["resnet_lone_range"] = _range(
      [r["predicted_alone"] / r["efficiency"] for r in table
       if r["model"] == RESNET])
  spreads = {(r["model"], r["rate"], r["variant"]): _spread(r["per_round"])
             for r in table}
  fields["per_round_within"] = _percent_within(spreads.values())
  fields["per_round_largest"] = f"{max(spreads.values()) * 100:.1f} %"
  return fields


def _compute_fields(result, compute):
  """A rank's compute in a job against the lone process's (`compute`:
  {model: {"alone": s, "lone": (compute, apply), exchange: s}})."""
  resnet = compute[RESNET]
  alone = resnet["alone"]

  def slower(model, exchange):
    return f"{compute[model][exchange] / compute[model]['alone'] - 1:+.0%}"

  return {
      "resnet_alone_ms": f"{alone * 1e3:.0f}",
      "resnet_compute_ms": f"{resnet['lone'][0] * 1e3:.0f}",
      "resnet_apply_ms": f"{resnet['lone'][1] * 1e3:.1f}",
      "resnet_mwms_ms": f"{resnet['collective'] * 1e3:.0f}",
      "resnet_horovod_ms": f"{resnet['horovod'] * 1e3:.0f}",
      "resnet_mwms_slower": slower(RESNET, "collective").replace("%", " %"),
      "resnet_horovod_slower": slower(RESNET, "horovod").replace("%", " %"),
      "mlp_mwms_slower": slower(MLP, "collective").replace("%", " %"),
      "mlp_horovod_slower": slower(MLP, "horovod").replace("%", " %"),
      "mlp_megabytes": f"{result['gradient_bytes'][MLP] / 1e6:.0f}",
      "in_job_k": network_rows.IN_JOB_K,
      "cycle_ms": f"{scaling_model.DEFAULT_CYCLE_S * 1e3:g}"}


def _baseline_fields(result):
  """The MLP's baselines within its first round against its 2-host rate,
  and its Horovod rows (one per link) divided by the two baselines nearest
  the variant."""
  samples = result["samples"][MLP]
  first = samples["single"][0]["runs"]
  horovod = [m["examples_per_sec"]
             for m in samples["rows"]["unshaped"]["horovod"]]
  nearest = []
  for by_variant in samples["rows"].values():
    per_round = [m["examples_per_sec"] / s["around"]["horovod"]
                 for m, s in zip(by_variant["horovod"], samples["single"])]
    nearest.append(max(per_round) / min(per_round) - 1)
  return {
      "mlp_baseline_low": repo.fmt(min(first)),
      "mlp_baseline_high": repo.fmt(max(first)),
      "mlp_horovod_moved": f"{max(horovod) / min(horovod) - 1:.0%}".replace(
          "%", " %"),
      "mlp_horovod_rounds": " and ".join(repo.fmt(r) for r in horovod),
      "mlp_nearest_range": (f"{min(nearest) * 100:.1f}-"
                            f"{max(nearest) * 100:.1f} %")}


def _allreduce_fields(allreduce_result):
  """The allreduce-only rows: how many the model holds within 15 %, and
  the rows the reading names."""
  names = ("held", "shaped", "range", "probe_3", "probe_3_model",
           "probe_3_others", "fp16_4", "fp16_4_model", "horovod_probe_range")
  if allreduce_result is None:
    return {f"allreduce_{n}": _NA for n in names}
  compared = analysis.comparison(allreduce_result)
  tested = [p / m for *_, m, p, t in compared if t]
  by_row = {(rate, hosts, label): (m, p)
            for rate, hosts, label, _, m, p, _ in compared}
  probe = f"{allreduce_result['probe_bytes']} B probe"
  collective_probe = by_row["1gbit", 3, probe + " collective"]
  fp16 = by_row["1gbit", 4, RESNET + " fp16"]
  return {
      "allreduce_held": sum(abs(r - 1) <= 0.15 for r in tested),
      "allreduce_shaped": len(tested),
      "allreduce_range": _range(tested),
      "allreduce_probe_3": f"{collective_probe[0] * 1e3:.1f}",
      "allreduce_probe_3_model": f"{collective_probe[1] * 1e3:.1f}",
      "allreduce_probe_3_others": " and ".join(
          f"{by_row[rate, 3, probe + ' collective'][0] * 1e3:.1f}"
          for rate in ("unshaped", "100mbit")),
      "allreduce_fp16_4": f"{fp16[0] * 1e3:.1f}",
      "allreduce_fp16_4_model": f"{fp16[1] * 1e3:.1f}",
      "allreduce_horovod_probe_range": _range(
          [p / m for rate, _, label, _, m, p, t in compared
           if t and label == probe])}


def fields(result, table, compute, allreduce_result):
  """reading.md's fields: `result` the rows' JSON, `table` render.rows'
  rows of it, `compute` the models' compute (see _compute_fields) and
  `allreduce_result` the allreduce runs' JSON (None: not measured)."""
  fit = allreduce_result and analysis.calibration(allreduce_result)
  rule = figures.rule_fields(fit, allreduce_result and
                             allreduce_result["buffers"], gbits=False)
  return dict(_row_fields(table), **_compute_fields(result, compute),
              **_baseline_fields(result), **_allreduce_fields(allreduce_result),
              **rule)

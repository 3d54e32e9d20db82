"""The AdaScale study's results: its tables, traces and their files.

build_table turns a task's runs into the JSON object study.json keeps;
write_outputs writes results/ and renders docs/adascale/ from it through
plots.py.
"""
import json
import os
import statistics

from tools import repo
from tools.study import plots
from tools.study import specs


def mean_std(values):
  """Mean and sample standard deviation (0 for a single value)."""
  values = [float(v) for v in values]
  return statistics.fmean(values), (
      statistics.stdev(values) if len(values) > 1 else 0.0)


def _row(runs, scales, method, micro_batch_size, ranks=()):
  accuracy, accuracy_std = mean_std(r["accuracy"] for r in runs)
  mean = lambda key: mean_std(r[key] for r in runs)[0]
  if ranks:  # told apart from the accumulation-based row of the same S
    method = f"{method}, ranks {specs.scale_label(ranks)}"
  return {"S": specs.scale_label(scales), "method": method,
          "elastic": len(scales) > 1,
          "total_batch": specs.scale_label(
              [s * micro_batch_size for s in scales]),
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
  groups = [((s,), m) for s in settings["scales"] for m in specs.METHODS]
  groups += [(scales, m) for scales in settings["elastic"]
             for m in specs.ELASTIC_METHODS]
  groups = [(scales, m, ()) for scales, m in groups] + [
      (specs.rank_scales(ranks), m, ranks)
      for ranks in settings.get("rank_elastic", ())
      for m in specs.ELASTIC_METHODS]
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


def traces_of(results):
  """AdaScale's sampled (tau, gain, lr) per run, for plots and re-plots."""
  return [{"model": r["model"], "S": specs.scale_label(r["scales"]),
           "seed": r["seed"],
           "points": [[round(v, 6) for v in p] for p in r["trace"]]}
          for r in sorted(results, key=lambda r: (
              r["model"], len(r["scales"]), r["scales"], r["seed"]))
          if r["method"] == "AS" and not r.get("ranks")]


def write_outputs(results_dir, out_dir, study, traces):
  """study.json and traces.json into results_dir, then their renderings
  into out_dir."""
  paths = [os.path.join(results_dir, n) for n in ("study.json", "traces.json")]
  repo.write(paths[0], json.dumps(study, indent=1))
  repo.write(paths[1], json.dumps(traces, separators=(",", ":")))
  return paths + plots.render(study, traces, out_dir)



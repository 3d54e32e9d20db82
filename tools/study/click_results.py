"""The click study's results: per task its S sweep, elastic and timed rows.

build_study turns the runs (runs.jsonl) into the JSON object study.json
keeps; time to AUC on 8 to 64 hosts comes from the network bench's model
(tools/bench/network/scaling_model.py) fed with what the 1-rank timed run
measured. Nothing here imports TensorFlow, so the page can be rebuilt
from runs.jsonl alone.
"""
import json
import os

from tools import repo
from tools.bench.network import scaling_model
from tools.study import click_plots
from tools.study import click_specs
from tools.study import results as digits_results
from tools.study import specs as digits

PROJECTED_HOSTS = (8, 16, 32, 64)
LINK_GBITS = 10


def read_runs(path):
  """The results runs.jsonl holds, one JSON object a line ([] if none)."""
  if not os.path.exists(path):
    return []
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


def _select(runs, **where):
  return [r for r in runs if all(
      (tuple(r[k]) if isinstance(v, tuple) else r[k]) == v
      for k, v in where.items())]


def _row(runs, **extra):
  auc, auc_std = digits_results.mean_std(r["auc"] for r in runs)
  mean = lambda key: digits_results.mean_std(r[key] for r in runs)[0]
  return dict(extra, auc_mean=round(auc, 5), auc_std=round(auc_std, 5),
              aucs=[round(r["auc"], 5) for r in
                    sorted(runs, key=lambda r: r["seed"])],
              loss=round(mean("loss"), 5), updates=round(mean("updates"), 1),
              micro_batches=round(mean("micro_batches"), 1),
              wall_seconds=round(mean("wall_seconds"), 2), seeds=len(runs))


def _sweep_rows(mine, settings):
  """Fixed-S rows of every optimizer and method, with their AUC deltas to
  their optimizer's S = 1 baseline (seed000: AdamW's, and the main one's)."""
  untimed = [r for r in mine if not r["timed"] and len(r["scales"]) == 1]
  baselines, rows = {}, []
  for optimizer in settings["optimizers"]:
    runs = _select(untimed, optimizer=optimizer, method="baseline")
    if runs:
      baselines[optimizer] = _row(runs, optimizer=optimizer, S=1,
                                  method="baseline")
  main = baselines.get(click_specs.MAIN_OPTIMIZER)
  seed_one = _select(untimed, method="seed000", scales=(1,))
  if seed_one:
    baselines["seed000"] = _row(seed_one, optimizer="adamw", S=1,
                                method="seed000")
  for optimizer in settings["optimizers"]:
    for method in click_specs.METHODS:
      for scale in settings["scales"]:
        runs = _select(untimed, optimizer=optimizer, method=method,
                       scales=(scale,))
        if scale == 1 or not runs:
          continue
        own = baselines.get("seed000" if method == "seed000" else optimizer)
        row = _row(runs, optimizer=optimizer, S=scale, method=method)
        row["auc_delta"] = round(row["auc_mean"] - own["auc_mean"], 5)
        if method == "seed000" and main:
          row["auc_delta_main"] = round(row["auc_mean"] - main["auc_mean"], 5)
        rows.append(row)
  return baselines, rows


def _elastic_rows(mine, baseline):
  rows = []
  for method in click_specs.ELASTIC_METHODS:
    runs = [r for r in _select(mine, method=method, timed=False)
            if len(r["scales"]) > 1]
    if runs:
      row = _row(runs, method=method, S=digits.scale_label(runs[0]["scales"]),
                 ranks=digits.scale_label(runs[0]["ranks"]))
      row["auc_delta"] = round(row["auc_mean"] - baseline["auc_mean"], 5)
      rows.append(row)
  return rows


def time_to(curve, target):
  """(updates, seconds) at the first checkpoint whose AUC reached
  `target`, or (None, None)."""
  for updates, seconds, auc in curve:
    if auc >= target:
      return updates, seconds
  return None, None


def compute_per_micro_batch(run):
  """Seconds per micro-batch between the run's first and last checkpoint
  (graph building and start-up left out)."""
  (first, start, _), (last, end, _) = run["curve"][0], run["curve"][-1]
  scale = run["scales"][0]
  return (end - start) / max(1, (last - first) * scale)


def projected_seconds(updates, compute_s, nbytes, hosts, scale=None):
  """Time to `updates` updates of S = `scale` on `hosts` hosts at 10
  Gbit/s: the network model's update time with S/hosts accumulation."""
  scale = scale or click_specs.TIME_SCALE
  link = scaling_model.Link(
      bandwidth=scaling_model.goodput(LINK_GBITS * 1e9),
      latency=scaling_model.DEFAULT_CLUSTER_LATENCY_S)
  recipe = scaling_model.Recipe(accumulation_steps=max(1, scale // hosts))
  return updates * scaling_model.update_seconds(compute_s, nbytes, hosts,
                                                link, recipe)


def _timed_rows(mine, baseline_auc):
  """Per method and ranks: when AUC first reached the S = 1 final AUC less
  the margin; per method the projection on 8 to 64 hosts."""
  target = baseline_auc - click_specs.AUC_MARGIN
  rows = []
  for run in sorted((r for r in mine if r["timed"]),
                    key=lambda r: (r["scales"], r["method"], r["ranks"])):
    updates, seconds = time_to(run["curve"], target)
    row = {"method": run["method"], "S": run["scales"][0],
           "ranks": run["ranks"][0], "auc": round(run["auc"], 5),
           "updates_to_target": updates, "seconds_to_target": seconds,
           "updates": run["updates"], "wall_seconds": run["wall_seconds"],
           "checkpoints": len(run["curve"]),
           "curve": run["curve"]}
    if run["ranks"][0] == 1 and run["curve"]:
      compute = compute_per_micro_batch(run)
      row["compute_ms_per_micro_batch"] = round(1e3 * compute, 3)
      row["trainable_bytes"] = run["trainable_bytes"]
      if updates is not None and run["scales"][0] == click_specs.TIME_SCALE:
        row["projected_seconds"] = {
            str(h): round(projected_seconds(updates, compute,
                                            run["trainable_bytes"], h), 2)
            for h in PROJECTED_HOSTS}
    rows.append(row)
  return {"target_auc": round(target, 5), "rows": rows}


def build_table(runs, settings):
  """One task's JSON object: baselines, sweep rows, elastic and timed rows,
  and whether AS (its elastic rows too) stayed within `AUC_TOLERANCE` of
  S = 1 everywhere: `met` both ways, `met_not_worse` at most that far
  below (AS reads more examples than T x micro-batch where its gain is
  below S, which can end above the S = 1 run)."""
  mine = _select(runs, model=settings["model"])
  baselines, rows = _sweep_rows(mine, settings)
  main = baselines.get(click_specs.MAIN_OPTIMIZER)
  elastic = _elastic_rows(mine, main) if main else []
  tolerance = click_specs.AUC_TOLERANCE
  deltas = {f"{r['optimizer']} S={r['S']}": r["auc_delta"]
            for r in rows if r["method"] == "AS"}
  deltas.update({f"elastic AS S={r['S']}": r["auc_delta"]
                 for r in elastic if r["method"] == "AS"})
  within = {k: abs(d) <= tolerance for k, d in deltas.items()}
  not_worse = {k: d >= -tolerance for k, d in deltas.items()}
  return {"model": settings["model"], "T": settings["T"],
          "micro_batch_size": settings["micro_batch_size"],
          "baselines": baselines, "rows": rows, "elastic": elastic,
          "timed": _timed_rows(mine, main["auc_mean"]) if main else None,
          "target": {"auc_tolerance": tolerance, "as_deltas": deltas,
                     "as_within": within,
                     "as_not_worse": not_worse,
                     "met": bool(within) and all(within.values()),
                     "met_not_worse": bool(within) and all(
                         not_worse.values())},
          "settings": {k: v for k, v in settings.items()
                       if k not in ("model", "T", "micro_batch_size")}}


def build_study(runs, tasks, wall_seconds, processes):
  """study.json's object: every task's table and how the study ran
  (`wall_seconds`: None when the page was only rebuilt from runs.jsonl)."""
  return {"tasks": [build_table(runs, t) for t in tasks],
          "study_wall_seconds": wall_seconds, "processes": processes,
          "runs": len(runs), "train_seconds_summed": round(
              sum(r["wall_seconds"] for r in runs), 1)}


def write_outputs(results_dir, out_dir, study):
  """study.json into results_dir, then the page and figures into out_dir."""
  path = os.path.join(results_dir, "study.json")
  repo.write(path, json.dumps(study, indent=1))
  return [path] + click_plots.render(study, out_dir)

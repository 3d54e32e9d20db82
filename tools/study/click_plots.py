"""Renderings of the click study's JSON: the page's tables and its PNGs.

  python -m tools.study.click_plots    # redraw docs/adascale/click_study.md

Kept apart from the training so the page can be redrawn from
results/click/study.json without retraining; its prose is
click_study.md.template's.
"""
import argparse
import json
import os

from tools import repo
from tools.study import click_specs
from tools.study import plots as digits_plots

_HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(_HERE, "results", "click")
PAGE_DIR = digits_plots.PAGE_DIR
PAGE = "click_study.md"
TEMPLATE = os.path.join(_HERE, "click_study.md.template")
STYLE = {"AS": ("tab:blue", "o"), "LSW": ("tab:orange", "s"),
         "sqrt": ("tab:green", "^"), "identity": ("tab:gray", "v"),
         "seed000": ("tab:red", "D")}
PANEL_NOTES = {"ftrl": "FTRL wide, Adagrad deep"}
ZOOM = 0.03
"""The AUC axis shows this much below the baseline; lower means sit on its
edge with their value written, so the ±0.002 band stays readable."""
CELL_COMMAND = (".venv/bin/python -m tools.study.click --tasks {task} "
                "--optimizers {optimizer} --methods {method} --scales {S} "
                "--no_elastic --no_timed --results_dir /tmp/cell "
                "--out_dir /tmp/cell")


def _auc(row):
  return f"{row['auc_mean']:.4f} ± {row['auc_std']:.4f}"


def _delta(row, key="auc_delta"):
  return f"{row[key]:+.4f}" if key in row else ""


def sweep_markdown(table):
  """The S sweep: per optimizer its baseline, then every method and S."""
  lines = ["| optimizer | S | total batch | method | AUC (mean ± std) | "
           "Δ vs S = 1 | per-seed AUC | log loss | updates | examples "
           "(× S = 1's) | wall (s) |",
           "|:---|---:|---:|:---|---:|---:|:---|---:|---:|---:|---:|"]
  micro, T = table["micro_batch_size"], table["T"]
  for base in table["baselines"].values():
    lines.append(f"| {base['optimizer']} | 1 | {micro} | {base['method']} | "
                 f"{_auc(base)} | | {', '.join(map(str, base['aucs']))} | "
                 f"{base['loss']:.4f} | {base['updates']:.0f} | 1.00 | "
                 f"{base['wall_seconds']:.1f} |")
  for row in table["rows"]:
    delta = _delta(row)
    if "auc_delta_main" in row:
      delta += f" ({_delta(row, 'auc_delta_main')} vs Adagrad)"
    bold = "**" if row["method"] == "AS" else ""
    lines.append(
        f"| {row['optimizer']} | {row['S']} | {row['S'] * micro} | "
        f"{bold}{row['method']}{bold} | {_auc(row)} | {delta} | "
        f"{', '.join(map(str, row['aucs']))} | {row['loss']:.4f} | "
        f"{row['updates']:.0f} | {row['micro_batches'] / T:.2f} | "
        f"{row['wall_seconds']:.1f} |")
  return "\n".join(lines) + "\n"


def elastic_markdown(table):
  if not table["elastic"]:
    return "No elastic rows were run for this task.\n"
  lines = ["| method | ranks | S | AUC (mean ± std) | Δ vs S = 1 | "
           "per-seed AUC | updates | wall (s) |",
           "|:---|:---|:---|---:|---:|:---|---:|---:|"]
  for row in table["elastic"]:
    lines.append(f"| {row['method']} | {row['ranks']} | {row['S']} | "
                 f"{_auc(row)} | {_delta(row)} | "
                 f"{', '.join(map(str, row['aucs']))} | "
                 f"{row['updates']:.0f} | {row['wall_seconds']:.1f} |")
  return "\n".join(lines) + "\n"


def _or_dash(value, fmt):
  return "not reached" if value is None else format(value, fmt)


def timed_markdown(table):
  """Time to AUC on 1, 2, 4 ranks, and the projection on 8-64 hosts."""
  timed = table["timed"]
  if not timed or not timed["rows"]:
    return "No timed rows were run for this task.\n"
  lines = [f"Target AUC: {timed['target_auc']:.4f} (the S = 1 Adagrad "
           f"baseline's mean less {click_specs.AUC_MARGIN}).", "",
           "| method | S | ranks | final AUC | updates to target | "
           "seconds to target | updates | wall (s) |",
           "|:---|---:|---:|---:|---:|---:|---:|---:|"]
  for row in timed["rows"]:
    lines.append(
        f"| {row['method']} | {row['S']} | {row['ranks']} | "
        f"{row['auc']:.4f} | {_or_dash(row['updates_to_target'], 'd')} | "
        f"{_or_dash(row['seconds_to_target'], '.1f')} | {row['updates']} | "
        f"{row['wall_seconds']:.1f} |")
  projected = [r for r in timed["rows"] if "compute_ms_per_micro_batch" in r
               and r["S"] == click_specs.TIME_SCALE]
  if projected:
    hosts = sorted({int(h) for r in projected
                    for h in r.get("projected_seconds", {})})
    lines += ["", "Projected seconds to the target AUC at S = "
              f"{click_specs.TIME_SCALE} on N hosts at 10 Gbit/s (network "
              "model; compute per micro-batch and gradient bytes from the "
              "1-rank run):", "",
              "| method | compute (ms/micro-batch) | gradient MB | "
              + " | ".join(f"{h} hosts" for h in hosts) + " |",
              "|:---|---:|---:|" + "---:|" * len(hosts)]
    for row in projected:
      seconds = row.get("projected_seconds", {})
      lines.append(
          f"| {row['method']} | {row['compute_ms_per_micro_batch']:.2f} | "
          f"{row['trainable_bytes'] / 1e6:.2f} | " + " | ".join(
              _or_dash(seconds.get(str(h)), ".1f") for h in hosts) + " |")
  return "\n".join(lines) + "\n"


def _band(row, tolerance, micro_batches_s1):
  """Whether a row's mean is within `tolerance` of S = 1, and if not which
  way, with what the judgement needs beside it: AS's examples read when
  above, the seeds' spread when below."""
  delta = row["auc_delta"]
  if abs(delta) <= tolerance:
    return "yes"
  if delta > 0:
    return (f"no, above ({row['micro_batches'] / micro_batches_s1:.1f}× "
            "the examples)")
  return f"no, below (seeds ± {row['auc_std']:.4f})"


def _cells(table, optimizer):
  return {(r["method"], r["S"]): r for r in table["rows"]
          if r["optimizer"] == optimizer}


def judgement_markdown(table):
  """Per S ≤ 64, AS's mean AUC against S = 1 and whether it is within the
  tolerance, beside LSW, seed 000's recipe, √S and the identity rule (the
  main optimizer); then AS with the other optimizers beside their LSW."""
  tolerance = table["target"]["auc_tolerance"]
  T = table["T"]
  main = click_specs.MAIN_OPTIMIZER
  cells = _cells(table, main)
  scales = sorted({s for m, s in cells})
  if not scales or main not in table["baselines"]:
    return "No S > 1 rows were run for this task.\n"
  base = table["baselines"][main]
  seed = table["baselines"].get("seed000")
  lines = [
      f"{main.capitalize()}, S = 1: AUC {_auc(base)}"
      + (f"; seed 000's recipe (AdamW) at S = 1: {_auc(seed)}" if seed
         else "") + ". Each Δ is to its own S = 1 row (seed000's to AdamW's;"
      " in brackets to Adagrad's); '—': not run.", "",
      f"| S | AS AUC | AS Δ | AS within ±{tolerance}? | LSW Δ | "
      "seed000 Δ (vs Adagrad) | sqrt Δ | identity Δ |",
      "|---:|---:|---:|:---|---:|---:|---:|---:|"]
  for scale in scales:
    adascale = cells.get(("AS", scale))
    seed_row = cells.get(("seed000", scale))
    other = lambda m: (_delta(cells[(m, scale)]) if (m, scale) in cells
                       else "—")
    lines.append(
        f"| {scale} | " + (
            f"{_auc(adascale)} | {_delta(adascale)} | "
            f"{_band(adascale, tolerance, T)} | " if adascale else
            "— | — | not run | ") + f"{other('LSW')} | " + (
                f"{_delta(seed_row)} ({_delta(seed_row, 'auc_delta_main')})"
                if seed_row else "—") +
        f" | {other('sqrt')} | {other('identity')} |")
  others = [r for r in table["rows"]
            if r["optimizer"] != main and r["method"] == "AS"]
  if others:
    lines += ["", "With the other optimizers (Δ to that optimizer's own "
              "S = 1 row; `ftrl`: FTRL on the wide part, Adagrad on the "
              "deep part):", "",
              f"| optimizer | S | its S = 1 AUC | AS AUC | AS Δ | AS within "
              f"±{tolerance}? | LSW Δ |", "|:---|---:|---:|---:|---:|:---|---:|"]
    for row in others:
      lsw = _cells(table, row["optimizer"]).get(("LSW", row["S"]))
      lines.append(
          f"| {row['optimizer']} | {row['S']} | "
          f"{_auc(table['baselines'][row['optimizer']])} | {_auc(row)} | "
          f"{_delta(row)} | {_band(row, tolerance, T)} | "
          f"{_delta(lsw) if lsw else '—'} |")
  return "\n".join(lines) + "\n"


def verdict(table):
  """Where AS (the elastic rows too) kept the S = 1 AUC within the
  tolerance, and where it ended above or below it."""
  target = table["target"]
  tolerance = target["auc_tolerance"]
  deltas = target.get("as_deltas", {})
  within = [k for k, ok in target["as_within"].items() if ok]
  above = [k for k, ok in target["as_within"].items()
           if not ok and target["as_not_worse"][k]]
  below = [k for k, ok in target["as_not_worse"].items() if not ok]
  said = lambda keys: ", ".join(
      f"{k} ({deltas[k]:+.4f})" if k in deltas else k for k in keys)
  lines = [f"AS within ±{tolerance} of the S = 1 AUC: "
           + (said(within) if within else "nowhere") + "."]
  if above:
    lines.append(f"AS more than {tolerance} **above** it: {said(above)}.")
  if below:
    lines.append(f"AS more than {tolerance} **below** it: {said(below)}.")
  lines.append("Every cell within or above: "
               + ("**yes**." if target["met_not_worse"] else "**no**."))
  return "\n".join(lines) + "\n"


def task_markdown(table):
  return "\n".join([
      f"### {table['model']}", "",
      f"T = {table['T']} updates at S = 1, {table['micro_batch_size']} "
      f"examples per micro-batch, {table['settings']['seeds']} seeds.", "",
      f"#### Is AS within ±{table['target']['auc_tolerance']} of S = 1? "
      f"({table['model']})", "", judgement_markdown(table), verdict(table),
      f"#### Every row ({table['model']})", "", sweep_markdown(table),
      f"#### Elastic rows ({table['model']})", "", elastic_markdown(table),
      f"#### Time to AUC ({table['model']})", "", timed_markdown(table)])


def commands(study):
  """The exact command line of every S > 1 cell, one per task, optimizer
  and method (S as listed)."""
  lines = []
  for table in study["tasks"]:
    cells = {}
    for row in table["rows"]:
      cells.setdefault((row["optimizer"], row["method"]), []).append(row["S"])
    for (optimizer, method), scales in cells.items():
      lines.append(CELL_COMMAND.format(
          task=table["model"], optimizer=optimizer, method=method,
          S=" ".join(map(str, scales))))
  return "\n".join(lines)


def coverage_markdown(study):
  """Which cells study.json holds, per task, optimizer and method: the S
  each ran at, and the elastic and timed rows, so the page's account of
  what ran cannot drift from the results."""
  lines = ["| task | optimizer | method | S (seeds) |", "|:---|:---|:---|:---|"]
  for table in study["tasks"]:
    cells = {}
    for base in table["baselines"].values():
      cells.setdefault((base["optimizer"], base["method"]), []).append(base)
    for row in table["rows"]:
      cells.setdefault((row["optimizer"], row["method"]), []).append(row)
    for (optimizer, method), rows in cells.items():
      lines.append(f"| {table['model']} | {optimizer} | {method} | "
                   + ", ".join(f"{r['S']} ({r['seeds']})" for r in rows)
                   + " |")
    for row in table["elastic"]:
      lines.append(f"| {table['model']} | adagrad | {row['method']}, "
                   f"elastic on {row['ranks']} ranks | {row['S']} "
                   f"({row['seeds']}) |")
    timed = (table["timed"] or {}).get("rows", [])
    if timed:
      lines.append(f"| {table['model']} | adagrad | time to AUC | " + ", ".join(
          f"{r['method']} S = {r['S']} on {r['ranks']} rank"
          f"{'s' if r['ranks'] > 1 else ''} (1)" for r in timed) + " |")
  return "\n".join(lines) + "\n"


def markdown(study):
  return repo.fill_template(TEMPLATE, dict(
      tasks="\n".join(task_markdown(t) for t in study["tasks"]),
      coverage=coverage_markdown(study),
      commands=commands(study),
      took=(f"The last invocation took {study['study_wall_seconds']:.0f} s "
            f"with {study['processes']} processes. " if
            study["study_wall_seconds"] is not None else ""),
      runs=study["runs"],
      train_seconds=f"{study['train_seconds_summed']:.0f}"))


def plot_auc(table, path):
  """AUC against S per method, one panel per optimizer; the grey band is
  the optimizer's S = 1 baseline ± the tolerance."""
  plt = digits_plots._pyplot()  # pylint: disable=protected-access
  optimizers = list(dict.fromkeys(r["optimizer"] for r in table["rows"]))
  fig, axes = plt.subplots(1, max(1, len(optimizers)), squeeze=False,
                           figsize=(5.5 * max(1, len(optimizers)), 4.2))
  tolerance = table["target"]["auc_tolerance"]
  for axis, optimizer in zip(axes[0], optimizers):
    base = table["baselines"][optimizer]
    floor = base["auc_mean"] - ZOOM
    axis.axhspan(base["auc_mean"] - tolerance, base["auc_mean"] + tolerance,
                 color="0.85", label=f"S = 1 ± {tolerance}")
    axis.axhline(base["auc_mean"], color="0.4", lw=1)
    scales = [1]
    for method, (color, marker) in STYLE.items():
      rows = [r for r in table["rows"]
              if r["optimizer"] == optimizer and r["method"] == method]
      if not rows:
        continue
      start = table["baselines"].get(
          "seed000" if method == "seed000" else optimizer)
      points = [(1, start)] + [(r["S"], r) for r in rows]
      scales = sorted(set(scales) | {s for s, _ in points})
      shown = [max(r["auc_mean"], floor) for _, r in points]
      axis.errorbar([s for s, _ in points], shown, color=color,
                    marker=marker, capsize=3, label=method,
                    yerr=[r["auc_std"] if r["auc_mean"] > floor else 0
                          for _, r in points])
      for (s, r), y in zip(points, shown):
        if r["auc_mean"] < floor:
          axis.annotate(f"{r['auc_mean']:.3f}", (s, y), color=color,
                        xytext=(3, 4 + 9 * list(STYLE).index(method)),
                        textcoords="offset points", fontsize=7)
    digits_plots._scale_axis(axis, scales)  # pylint: disable=protected-access
    top = max([base["auc_mean"] + 2 * tolerance] + [
        r["auc_mean"] + r["auc_std"] for r in table["rows"]
        if r["optimizer"] == optimizer])
    axis.set_ylim(floor - 0.002, top + 0.002)
    axis.set_ylabel("held-out AUC, mean ± std over seeds")
    notes = [PANEL_NOTES[optimizer]] if optimizer in PANEL_NOTES else []
    if any(r["optimizer"] == optimizer and r["method"] == "seed000"
           for r in table["rows"]):
      notes.append("seed000: AdamW")
    axis.set_title(f"{table['model']}, {optimizer}"
                   + (f" ({'; '.join(notes)})" if notes else ""), fontsize=10)
    axis.legend(fontsize=7, loc="lower left")
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def render(study, out_dir):
  """Writes the page and every task's AUC figure; returns their paths."""
  os.makedirs(out_dir, exist_ok=True)
  paths = [os.path.join(out_dir, PAGE)]
  repo.write(paths[0], markdown(study))
  for table in study["tasks"]:
    if table["rows"]:
      paths.append(os.path.join(out_dir, f"auc_{table['model']}.png"))
      plot_auc(table, paths[-1])
  return paths


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--results_dir", default=RESULTS)
  parser.add_argument("--out_dir", default=PAGE_DIR)
  args = parser.parse_args(argv)
  with open(os.path.join(args.results_dir, "study.json"),
            encoding="utf-8") as f:
    study = json.load(f)
  print("\n".join(render(study, args.out_dir)))


if __name__ == "__main__":
  main()

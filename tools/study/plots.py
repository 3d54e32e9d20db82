"""Renderings of the study's JSON: the Markdown tables and PNGs.

  python -m tools.study.plots     # redraw docs/adascale/ from results/

Kept apart from the training (runs.py) so the tables and figures can be
redrawn (or restyled) from results/study.json and results/traces.json
without retraining anything; study.md's prose is study.md.template's.
"""
import argparse
import json
import os

from tools import repo

_HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(_HERE, "results")
PAGE_DIR = os.path.join(repo.DOCS, "adascale")
TEMPLATE = os.path.join(_HERE, "study.md.template")

STYLE = {"AS": ("tab:blue", "o"), "LSW": ("tab:orange", "s"),
         "LSW+": ("tab:green", "^"), "LARS": ("tab:red", "D")}
FIGURES = ("accuracy", "gain", "lr", "elastic")
"""One PNG of each per task, named `<figure>_<model>.png`."""
ZOOM_POINTS = 6.0
"""The accuracy axis shows this much below the baseline; lower points (a
diverged run) sit on its edge with their value written, so the ±1 point
band stays readable."""


def _cells(scale, batch, method, row):
  return (f"| {scale} | {batch} | {method} | "
          f"{row['accuracy_mean']:.2f} ± {row['accuracy_std']:.2f} | "
          f"{row['train_loss']:.3g} | {row['updates']:.0f} | "
          f"{row['wall_seconds']:.1f} |")


def _verdict(table):
  target = table["target"]
  missed = [s for s, ok in target["as_accuracy_within"].items() if not ok]
  within = "yes" if not missed else "no, missed at S = " + ", ".join(missed)
  over = [s for s, ok in target["as_updates_within"].items() if not ok]
  updates = ("yes" if not over else "no, over at S = " + ", ".join(over))
  return (f"Target: AS within {target['accuracy_points']:g} point of the "
          f"baseline at every S and in the elastic runs: {within}; AS "
          f"updates <= 2T/S for S <= {target['updates_limit_S']}: {updates}. "
          f"Met: **{'yes' if target['met'] else 'no'}**.")


def _smoothing(theta):
  return "θ = max(1 − n/1000, 0)" if theta is None else f"θ = {theta:g}"


def task_markdown(table):
  """One task as the paper's Table 2, plus the verdict on the target."""
  settings = table["settings"]
  micro = settings["micro_batch_size"]
  lines = [
      f"Model `{table['model']}`, T = {table['T']} scale-invariant steps, "
      f"{micro} examples per gradient sample, lr {settings['learning_rate']:g}"
      f" (LARS {settings['lars_learning_rate']:g}), AdaScale smoothing "
      f"{_smoothing(settings.get('adascale_smoothing'))}, {settings['seeds']} "
      "seeds (mean ± sample std; train loss, updates and wall time are "
      "means).", "",
      "| S | total batch | method | test accuracy (%) | final train loss "
      "| updates | wall time (s) |",
      "|---:|---:|:---|---:|---:|---:|---:|",
      _cells(1, micro, "baseline", table["baseline"])]
  lines += [_cells(r["S"], r["total_batch"], r["method"], r)
            for r in table["rows"]]
  return "\n".join(lines + ["", _verdict(table)]) + "\n"


def markdown(study):
  """Every task's table, and how long the whole study took."""
  return repo.fill_template(TEMPLATE, dict(
      tasks="\n".join(task_markdown(t) for t in study["tasks"]),
      wall_seconds=f"{study['study_wall_seconds']:.0f}",
      processes=study["processes"], workers=study["workers"]))


def _pyplot():
  # Not at the top: matplotlib is the optional `plots` extra, needed only
  # to draw; the tables and the page render without it.
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")  # no display on build machines
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


def _scale_axis(axis, scales):
  axis.set_xscale("log", base=2)
  axis.set_xticks(scales)
  axis.set_xticklabels([str(s) for s in scales])
  axis.set_xlabel("scale S (gradient samples per update)")


def plot_accuracy(table, path):
  """Accuracy and updates against S per method (elastic runs aside).

  The baseline's grey band is the target (±1 point); the updates panel has
  perfect scaling (T/S) and the target's limit (2T/S) as references.
  """
  plt = _pyplot()
  rows = [dict(r, S=int(r["S"])) for r in table["rows"] if not r["elastic"]]
  base, T = table["baseline"], table["T"]
  scales = sorted({r["S"] for r in rows})
  points = table["target"]["accuracy_points"]
  floor = base["accuracy_mean"] - ZOOM_POINTS
  fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
  left.axhspan(base["accuracy_mean"] - points, base["accuracy_mean"] + points,
               color="0.85", label=f"S = 1 baseline ± {points:g} point")
  left.axhline(base["accuracy_mean"], color="0.4", lw=1)
  for method, (color, marker) in STYLE.items():
    mine = sorted((r for r in rows if r["method"] == method),
                  key=lambda r: r["S"])
    if not mine:
      continue
    xs = [r["S"] for r in mine]
    shown = [max(r["accuracy_mean"], floor) for r in mine]
    left.errorbar(xs, shown, color=color, marker=marker, capsize=3,
                  yerr=[r["accuracy_std"] if r["accuracy_mean"] > floor
                        else 0 for r in mine], label=method)
    for x, y, r in zip(xs, shown, mine):
      if r["accuracy_mean"] < floor:
        left.annotate(f"{r['accuracy_mean']:.0f}%", (x, y), color=color,
                      xytext=(4, 4 + 9 * list(STYLE).index(method)),
                      textcoords="offset points", fontsize=8)
    right.plot(xs, [r["updates"] for r in mine], color=color, marker=marker,
               label=method)
  _scale_axis(left, scales)
  top = max([base["accuracy_mean"] + points + 0.5] +
            [r["accuracy_mean"] + r["accuracy_std"] + 0.3 for r in rows])
  left.set_ylim(floor - 0.5, min(100, top))
  left.set_ylabel("test accuracy (%), mean ± std over seeds")
  left.set_title(f"{table['model']}: test accuracy (means < {floor:.0f}% "
                 "pinned to the edge, value written)", fontsize=10)
  left.legend(fontsize=8, loc="lower left")
  right.plot(scales, [T / s for s in scales], "k--", lw=1,
             label="T/S (perfect scaling)")
  right.plot(scales, [2 * T / s for s in scales], "k:", lw=1,
             label="2T/S (target limit)")
  _scale_axis(right, scales)
  right.set_yscale("log")
  right.set_ylabel("updates (mean over seeds)")
  right.set_title(f"updates to finish (T = {T})", fontsize=10)
  right.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def _first_seed_per_scale(traces):
  """The first seed's trace at each fixed S (elastic runs aside)."""
  chosen = {}
  for trace in (dict(t, S=int(t["S"])) for t in traces if "→" not in t["S"]):
    if trace["S"] not in chosen or trace["seed"] < chosen[trace["S"]]["seed"]:
      chosen[trace["S"]] = trace
  return [chosen[s] for s in sorted(chosen)]


def _per_scale(traces, path, column, ylabel, title, reference=None,
               legend="best"):
  plt = _pyplot()
  chosen = _first_seed_per_scale(traces)
  colors = plt.get_cmap("viridis")
  fig, axis = plt.subplots(figsize=(7.5, 4.5))
  if reference is not None:
    axis.plot(*reference, "k--", lw=1, label="S = 1 schedule")
  for i, trace in enumerate(chosen):
    points = trace["points"]
    axis.plot([p[0] for p in points], [p[column] for p in points],
              color=colors(i / max(1, len(chosen) - 1)), lw=1.2,
              label=f"S = {trace['S']}")
  axis.set_yscale("log", base=2 if column == 1 else 10)
  axis.set_xlabel("scale-invariant progress τ (S = 1 steps)")
  axis.set_ylabel(ylabel)
  axis.set_title(title, fontsize=10)
  axis.legend(fontsize=8, ncol=3, loc=legend)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def _schedule_curve(table):
  """The S = 1 step-decay schedule as (tau, lr) corners of a step line."""
  settings, T = table["settings"], table["T"]
  rate, decay = settings["learning_rate"], settings["decay_rate"]
  taus, rates = [0], [rate]
  for boundary in (round(f * T) for f in settings["decay_fractions"]):
    taus += [boundary, boundary]
    rates += [rate, rate * decay]
    rate *= decay
  return taus + [T], rates + [rate]


def plot_gain(table, traces, path):
  """AdaScale's gain r over tau, one line per S (the first seed)."""
  _per_scale(traces, path, 1, "gain r (log scale; 1 ≤ r ≤ S)",
             f"{table['model']}: AdaScale gain over τ (first seed per S)",
             legend="lower right")


def plot_lr(table, traces, path):
  """The lr AdaScale applied over tau per S, over the S = 1 schedule."""
  _per_scale(traces, path, 2, "effective learning rate r × lr(⌊τ⌋)",
             f"{table['model']}: AdaScale learning rate over τ "
             "(first seed per S)", reference=_schedule_curve(table))


def plot_elastic(table, traces, path):
  """Gain and lr over tau of the elastic AS runs (first seed), S changes
  marked: the gain should follow the new S while tau runs on."""
  plt = _pyplot()
  elastic = {}
  for trace in traces:
    if "→" in trace["S"] and trace["S"] not in elastic:
      elastic[trace["S"]] = trace  # traces come sorted by seed
  fig, (gain, lr) = plt.subplots(1, 2, figsize=(11, 4.2))
  for (label, trace), color in zip(sorted(elastic.items()),
                                   ("tab:purple", "tab:olive")):
    points = trace["points"]
    taus = [p[0] for p in points]
    gain.plot(taus, [p[1] for p in points], color=color, label=f"S = {label}")
    lr.plot(taus, [p[2] for p in points], color=color, label=f"S = {label}")
  lr.plot(*_schedule_curve(table), "k--", lw=1, label="S = 1 schedule")
  stages = len(next(iter(elastic.values()))["S"].split("→")) if elastic else 0
  for axis in (gain, lr):
    for i in range(1, stages):
      axis.axvline(table["T"] * i / stages, color="0.6", ls=":", lw=1)
    axis.set_xlabel("scale-invariant progress τ (S = 1 steps; dotted: S "
                    "changes)")
    axis.set_yscale("log", base=2 if axis is gain else 10)
    axis.legend(fontsize=8)
  gain.set_ylabel("gain r")
  lr.set_ylabel("effective learning rate r × lr(⌊τ⌋)")
  gain.set_title(f"{table['model']}: elastic AdaScale, gain over τ",
                 fontsize=10)
  lr.set_title("learning rate over τ (first seed)", fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def render(study, traces, out_dir):
  """Writes study.md and every task's figures into out_dir; returns paths."""
  os.makedirs(out_dir, exist_ok=True)
  paths = [os.path.join(out_dir, "study.md")]
  repo.write(paths[0], markdown(study))
  plots = {"accuracy": lambda t, tr, p: plot_accuracy(t, p),
           "gain": plot_gain, "lr": plot_lr, "elastic": plot_elastic}
  for table in study["tasks"]:
    mine = [t for t in traces if t["model"] == table["model"]]
    for figure in FIGURES:
      paths.append(os.path.join(out_dir, f"{figure}_{table['model']}.png"))
      plots[figure](table, mine, paths[-1])
  return paths


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--results_dir", default=RESULTS,
                      help="where study.json and traces.json are")
  parser.add_argument("--out_dir", default=PAGE_DIR,
                      help="where study.md and the figures go")
  args = parser.parse_args(argv)
  with open(os.path.join(args.results_dir, "study.json"),
            encoding="utf-8") as f:
    study = json.load(f)
  with open(os.path.join(args.results_dir, "traces.json"),
            encoding="utf-8") as f:
    traces = json.load(f)
  print("\n".join(render(study, traces, args.out_dir)))


if __name__ == "__main__":
  main()

"""Renders the large-batch study's page and figures from study.json
(`python -m tools.study.batch --render_only` rebuilds both from runs.jsonl).
"""
import os

from tools import repo
from tools.study import batch_specs
from tools.study import plots as digits_plots

_HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(_HERE, "results", "batch")
PAGE_DIR = digits_plots.PAGE_DIR
PAGE = "batch_study.md"
TEMPLATE = os.path.join(_HERE, "batch_study.md.template")
COLORS = {1: "black", 8: "tab:green", 32: "tab:blue", 64: "tab:orange",
          128: "tab:red"}


def _fmt(value, spec):
  return "n/a" if value is None else format(value, spec)


def _band(row):
  """Where the AUC lies against the S = 1 run's: within the margin, or
  above or below it."""
  if row["within"]:
    return "within"
  return "above" if row["auc_delta"] > 0 else "below"


def rows_markdown(entry):
  """The sweep's table: one row per cell, the S = 1 baseline first."""
  lines = ["| S | global batch | method | AUC | vs S = 1 (±0.001) | updates | "
           "examples read (x S = 1) | to S = 1 AUC - 0.001 (x S = 1's) | "
           "tau |",
           "|---|---|---|---|---|---|---|---|---|"]
  for row in [entry["baseline"]] + entry["rows"]:
    tau = "" if row["tau"] is None else f"{row['tau']:,.0f}"
    if row["cap_bound"]:
      tau += " (cap)"
    if row["mean_gain"] is not None:
      tau += f", mean gain {row['mean_gain']:.1f}"
    ratio = _fmt(row["to_target_ratio"], ".2f")
    reached = ("never" if row["examples_to_target"] is None else
               f"{row['examples_to_target'] / 1e6:.2f} M ({ratio})")
    lines.append(
        f"| {row['scale']} | {row['global_batch']:,} | {row['method']} | "
        f"{row['auc']:.4f} | {row['auc_delta']:+.4f} {_band(row)} | "
        f"{row['updates']:,} | "
        f"{row['examples'] / 1e6:.2f} M ({row['examples_ratio']:.2f}) | "
        f"{reached} | {tau} |")
  return "\n".join(lines)


def projection_markdown(entry, hosts):
  """Hours to the target per method at its largest S, per host count."""
  lines = ["| method | S | " + " | ".join(f"{h} hosts" for h in hosts) +
           " |", "|---|---|" + "---|" * len(hosts)]
  for row in entry["projection"]:
    cells = ["never" if h is None else f"{h * 60:.1f} min"
             for h in row["hours"]]
    lines.append(f"| {row['method']} | {row['scale']} | " +
                 " | ".join(cells) + " |")
  return "\n".join(lines)


def best_of(rows):
  """The row that reached the target on the fewest examples, or the one
  with the highest AUC where none reached it."""
  reached = [r for r in rows if r["examples_to_target"]]
  if reached:
    return min(reached, key=lambda r: r["examples_to_target"])
  return max(rows, key=lambda r: r["auc"])


def best_markdown(study, optimizer):
  """One line per S: the method that reached the target on the fewest
  examples, or the closest where none did."""
  entry = study["optimizers"][optimizer]
  target = entry["baseline"]["auc"] - study["margin"]
  lines = []
  for scale in sorted({r["scale"] for r in entry["rows"]}):
    rows = [r for r in entry["rows"] if r["scale"] == scale]
    best = best_of(rows)
    reached = [r for r in rows if r["examples_to_target"]]
    if reached:
      lines.append(
          f"- S = {scale} (global {best['global_batch']:,}): "
          f"**{best['method']}** reached {target:.4f} after "
          f"{best['examples_to_target'] / 1e6:.2f} M examples "
          f"({best['to_target_ratio']:.2f}x the S = 1 run's); reached by "
          + ", ".join(r["method"] for r in reached) + ".")
    else:
      gains = [f"{r['method']} {r['mean_gain']:.1f}"
               for r in rows if r["mean_gain"] is not None]
      why = (f" AdaScale's mean gain was {', '.join(gains)} of S = {scale}:"
             " an update did the work of that many micro-batches of S = 1,"
             " so reaching the S = 1 AUC takes about S / gain times the S = 1"
             " run's examples."
             if gains else "")
      lines.append(
          f"- S = {scale} (global {best['global_batch']:,}): no method "
          f"reached the target; the closest, **{best['method']}**, ended "
          f"{-best['auc_delta']:.4f} below the S = 1 AUC.{why}")
  return "\n".join(lines)


def _baseline_auc(baseline):
  """The S = 1 AUC, and over several seeds their range: the run-to-run
  noise a cell's difference is read against."""
  if baseline["seeds"] == 1:
    return f"{baseline['auc']:.4f}"
  low, high = baseline["auc_range"]
  return (f"{baseline['auc']:.4f} (the mean of {baseline['seeds']} seeds, "
          f"{low:.4f} to {high:.4f})")


def section(study, optimizer):
  entry = study["optimizers"][optimizer]
  missing = (", ".join(entry["missing"]) if entry["missing"] else "none")
  return "\n\n".join([
      f"### {optimizer}",
      f"S = 1: AUC {_baseline_auc(entry['baseline'])} after "
      f"{entry['baseline']['updates']:,} updates; "
      f"{entry['compute_ms']:.1f} ms a micro-batch of "
      f"{study['micro_batch']} on one process; "
      f"{entry['dense_bytes'] / 1e3:.0f} kB of dense variables.",
      rows_markdown(entry),
      f"![AUC against examples read, {optimizer}](batch_auc_{optimizer}.png)",
      best_markdown(study, optimizer),
      f"Time to the S = 1 AUC - {study['margin']} projected on hosts "
      f"joined by {study['link_gbits']} Gbit/s links, for the S = 1 run "
      "and every cell that reached it:",
      projection_markdown(entry, study["hosts"]),
      f"Cells not run: {missing}."])


def not_run_markdown(study):
  """A line per optimizer of the grid with no run at all."""
  lines = [f"- {optimizer}: no run; `python -m tools.study.batch "
           f"--optimizers {optimizer} --resume` runs its "
           f"{len(batch_specs.grid((optimizer,)))} cells."
           for optimizer in batch_specs.OPTIMIZERS
           if optimizer not in study["optimizers"]]
  return "\n".join(lines) or "Every optimizer of the grid has runs."


def _seeds(study):
  """What the template's Seeds line says: one per cell, and the baselines'
  count where they ran more."""
  bases = {o: e["baseline"] for o, e in study["optimizers"].items()
           if e["baseline"]["seeds"] > 1}
  if not bases:
    return "one per cell"
  spreads = {o: b["auc_range"][1] - b["auc_range"][0]
             for o, b in bases.items()}
  line = ("one per cell, but for the S = 1 baselines (" + ", ".join(
      f"{o} {b['seeds']}" for o, b in bases.items()) + "): their spread is "
          "the run-to-run noise of the AUC")
  wide = [f"{o} {spread:.4f}" for o, spread in spreads.items()
          if spread > study["margin"]]
  if wide:
    line += (f". It is wider than the ±{study['margin']} margin ("
             + ", ".join(wide) + "), so one seed of a cell cannot tell a "
             "difference of that size from noise")
  return line


def _run_hours(study):
  """The hours the runs on the page took, each run counted alone."""
  return sum(entry["baseline"]["wall_seconds"] +
             sum(row["wall_seconds"] for row in entry["rows"])
             for entry in study["optimizers"].values()) / 3600


def markdown(study):
  """The page: the template's prose around the tables."""
  return repo.fill_template(TEMPLATE, dict(
      train_rows=f"{study['train_rows']:,}",
      eval_rows=f"{study['eval_rows']:,}", T=f"{study['T']:,}",
      cap=study["cap"], margin=study["margin"],
      sections="\n\n".join(section(study, o) for o in study["optimizers"]),
      not_run=not_run_markdown(study),
      run_hours=f"{_run_hours(study):.1f}", seeds=_seeds(study),
      wall=("" if not study["wall_seconds"] else
            f" The last invocation trained for "
            f"{study['wall_seconds'] / 3600:.1f} h on "
            f"{study['processes']} processes.")))


def plot_curves(study, optimizer, path):
  """AUC against examples read, one panel per method, a line per S; each
  panel's axis starts below its runs' second checkpoints (the first of a
  run of many sits far below)."""
  plt = digits_plots._pyplot()  # pylint: disable=protected-access
  entry = study["optimizers"][optimizer]
  methods = list(dict.fromkeys(r["method"] for r in entry["rows"]))
  columns = 3
  lines = max(1, -(-len(methods) // columns))
  fig, axes = plt.subplots(lines, columns, squeeze=False,
                           figsize=(4.6 * columns, 3.6 * lines))
  base = entry["baseline"]
  target = base["auc"] - study["margin"]
  top = max(a for row in [base] + entry["rows"] for _, a in row["curve"])
  for axis, method in zip(axes.flat, methods):
    shown = [base] + [r for r in entry["rows"] if r["method"] == method]
    lowest = min(a for row in shown
                 for _, a in row["curve"][1:] or row["curve"])
    for row in shown:
      xs = [x / 1e6 for x, _ in row["curve"]]
      axis.plot(xs, [a for _, a in row["curve"]], marker=".",
                color=COLORS.get(row["scale"], "tab:purple"),
                label=f"S = {row['scale']}")
    axis.axhline(target, color="0.5", ls="--", lw=1,
                 label=f"S = 1 AUC - {study['margin']}")
    axis.set_ylim(min(target - 0.02, lowest - 0.005), top + 0.002)
    axis.set_title(f"{method} ({optimizer})", fontsize=10)
    axis.set_xlabel("examples read (millions)")
    axis.set_ylabel("held-out AUC")
    axis.legend(fontsize=7, loc="lower right")
  for axis in list(axes.flat)[len(methods):]:
    axis.axis("off")
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def render(study, out_dir):
  """Writes the page and each optimizer's figure; returns their paths."""
  paths = [os.path.join(out_dir, PAGE)]
  repo.write(paths[0], markdown(study))
  for optimizer, entry in study["optimizers"].items():
    if entry["rows"]:
      paths.append(os.path.join(out_dir, f"batch_auc_{optimizer}.png"))
      plot_curves(study, optimizer, paths[-1])
  return paths


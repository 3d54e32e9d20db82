"""The summary of a job trained day by day (`days.json`, read on resume).

Per day: records, steps, timings, table usage, export, evaluation; plus
the best. `days.md` renders it, `auc_by_day.png` plots it.
"""
import datetime
import json
import os

import tensorflow as tf

SUMMARY_FILE = "days.json"
TABLE_FILE = "days.md"
PLOT_FILE = "auc_by_day.png"
BEST_FILE = "best.json"
"""Written into the export directory: the best day's export."""

_COLUMNS = (("day", "day"), ("examples", "examples"),
            ("left_out", "left out"), ("updates", "updates"),
            ("examples_per_sec", "examples/s"), ("eval_day", "judged on"))


def load(model_dir):
  """The summary in model_dir, or an empty one."""
  path = os.path.join(model_dir, SUMMARY_FILE)
  if not tf.io.gfile.exists(path):
    return {"days": {}}
  with tf.io.gfile.GFile(path) as f:
    return json.load(f)


def entry(summary, day):
  """The summary's entry of `day`, made empty if it has none."""
  return summary["days"].setdefault(str(day), {})


def said(metrics):
  return ", ".join(f"{k} = {v:.4g}" for k, v in sorted(metrics.items()))


def keep_best(summary, export_dir, metric, higher_is_better):
  """Names the best export by `metric` in the summary and in best.json."""
  judged = [(day, e) for day, e in sorted(summary["days"].items())
            if metric in e.get("eval", {}) and "export" in e]
  if not judged:
    return
  sign = 1.0 if higher_is_better else -1.0
  day, best = max(judged, key=lambda item: sign * item[1]["eval"][metric])
  summary["best"] = {"day": day, "metric": metric,
                     "value": best["eval"][metric], "export": best["export"],
                     "judged_on": best["eval_day"]}
  _write(os.path.join(export_dir, BEST_FILE),
         json.dumps(summary["best"], indent=2, sort_keys=True))


def table(summary, metric="auc"):
  """The summary as a markdown table, a row per day."""
  head = [title for _, title in _COLUMNS] + [f"{metric} on the next day"]
  with_tables = any("tables" in e for e in summary["days"].values())
  if with_tables:
    head.append("table rows (admitted, evicted)")
  lines = ["| " + " | ".join(head) + " |",
           "|" + "---|" * len(head)]
  for day, e in sorted(summary["days"].items()):
    cells = [day] + [_cell(e.get(key)) for key, _ in _COLUMNS[1:]]
    cells.append(_cell(e.get("eval", {}).get(metric)))
    if with_tables:
      cells.append(_tables_cell(e.get("tables")))
    lines.append("| " + " | ".join(cells) + " |")
  best = summary.get("best")
  if best:
    lines.append("")
    lines.append(f"Best: {best['day']} ({best['metric']} "
                 f"{best['value']:.4f} on {best['judged_on']}), exported "
                 f"to {best['export']}")
  return "\n".join(lines) + "\n"


def _tables_cell(tables):
  """Every dynamic table's rows in use, admitted and evicted, summed."""
  if not tables:
    return "-"
  rows, admitted, evicted = (sum(t[key] for t in tables.values())
                             for key in ("rows", "admitted", "evicted"))
  return f"{rows:,} (+{admitted:,}, -{evicted:,})"


def _cell(value):
  if value is None:
    return "-"
  if isinstance(value, float):
    return f"{value:.4f}" if value < 100 else f"{value:.0f}"
  return str(value)


def _write(path, text):
  """Replaces `path` at once: a reader never sees half of it."""
  tf.io.gfile.makedirs(os.path.dirname(path))
  with tf.io.gfile.GFile(path + ".tmp", "w") as f:
    f.write(text)
  tf.io.gfile.rename(path + ".tmp", path, overwrite=True)


def save(summary, model_dir, metric=None):
  """Writes days.json; with `metric`, days.md and the plot too."""
  _write(os.path.join(model_dir, SUMMARY_FILE),
         json.dumps(summary, indent=2, sort_keys=True))
  if metric:
    _write(os.path.join(model_dir, TABLE_FILE), table(summary, metric))
    plot(summary, os.path.join(model_dir, PLOT_FILE), metric)


def plot(summary, path, metric="auc"):
  """Plots `metric` by day; whether it did (needs matplotlib, a judged day)."""
  points = [(day, e["eval"][metric]) for day, e in
            sorted(summary["days"].items()) if metric in e.get("eval", {})]
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
  except ImportError:
    return False
  if not points:
    return False
  matplotlib.use("Agg")  # files only: no display
  from matplotlib import pyplot  # pylint: disable=g-import-not-at-top
  figure, axes = pyplot.subplots(figsize=(6, 3.5))
  axes.plot([datetime.date.fromisoformat(day) for day, _ in points],
            [value for _, value in points], marker="o")
  axes.set_xlabel("day trained")
  axes.set_ylabel(f"{metric} on the next day")
  figure.autofmt_xdate()
  figure.tight_layout()
  with tf.io.gfile.GFile(path, "wb") as f:
    figure.savefig(f, format="png")
  pyplot.close(figure)
  return True

"""docs/TABLE_COSTS.md from results/table_costs.json.

The page states each cost's growth from the fitted lines (fit.py) and the
plan from their slopes (plan.py); nothing on it is typed by hand but the
template's prose, so a rerun rewrites every figure and verdict.
"""
import os

from tools import repo
from tools.bench.table_costs import figures
from tools.bench.table_costs import fit
from tools.bench.table_costs import plan as plans

_HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(_HERE, "results", "table_costs.json")
TEMPLATE = os.path.join(_HERE, "TABLE_COSTS.md.template")
PAGE = os.path.join(repo.DOCS, "TABLE_COSTS.md")
MIB = 1 << 20
NOT_BUILT = "not built yet"
SECONDS = {"step": "step", "save": "full save", "restore": "restore",
           "reshard": "re-shard", "eval": "evaluation", "export": "export"}
BYTES = {"peak": "peak resident memory per process",
         "checkpoint_bytes": "checkpoint size", "export_bytes": "export size"}
PER = 1 << 20
"""Slopes are written per 2^20 rows."""


def _seconds(cell, cost):
  entry = cell.get(cost)
  if entry is None:
    return "-"
  value = entry["value"]
  return f"{value * 1000:.1f} ms" if cost == "step" else f"{value:.2f}"


def _mib(value):
  return "-" if value is None else f"{value / MIB:,.0f}"


def costs_table(cells, dimension):
  """One line per size and rank count, in that order."""
  lines = [
      "| rows | rows + slot MiB | ranks | step | full save s | delta save "
      "1 % s | delta save 10 % s | restore s | re-shard s (from) | "
      "evaluation s | export s | peak MiB: train / eval / export | "
      "checkpoint MiB | export MiB |",
      "|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"]
  for (rows, ranks), cell in sorted(cells.items()):
    if "failed" in cell and "step" not in cell:
      lines.append(f"| 2^{rows.bit_length() - 1} | - | {ranks} | failed "
                   f"({', '.join(cell['failed'])} job) |" + " - |" * 10)
      continue
    reshard = _seconds(cell, "reshard")
    if "reshard_from" in cell and reshard != "-":
      reshard += f" ({cell['reshard_from']})"
    peaks = " / ".join(_mib(cell.get(k, {}).get("value")) for k in (
        "peak_train", "peak_eval", "peak_export"))
    lines.append(
        f"| 2^{rows.bit_length() - 1} | "
        f"{plans.row_bytes(dimension) * rows / MIB:,.0f} | {ranks} | "
        f"{_seconds(cell, 'step')} | {_seconds(cell, 'save')} | {NOT_BUILT} "
        f"| {NOT_BUILT} | {_seconds(cell, 'restore')} | {reshard} | "
        f"{_seconds(cell, 'eval')} | {_seconds(cell, 'export')} | {peaks} | "
        f"{_mib(cell.get('checkpoint_bytes', {}).get('value'))} | "
        f"{_mib(cell.get('export_bytes', {}).get('value'))} |")
  return "\n".join(lines)


def rounds_line(cells):
  """How many jobs each column's figures are the median of."""
  said = []
  for cost, label in SECONDS.items():
    counts = sorted({cell[cost]["rounds"] for cell in cells.values()
                     if cost in cell})
    if counts:
      said.append(f"{label} {' or '.join(map(str, counts))}")
  return ("Rounds (jobs per figure, the median where more than one): "
          + ", ".join(said) + "; memory and sizes as the seconds of the "
          "same phase.")


def skipped_line(cells, settings):
  """The sizes and rank counts not measured, and why."""
  measured = {}
  for rows, ranks in cells:
    measured.setdefault(rows, set()).add(ranks)
  missing = []
  for rows, have in sorted(measured.items()):
    left = sorted(set(settings["ranks"]) - have)
    if left:
      missing.append(f"2^{rows.bit_length() - 1} rows on "
                     f"{', '.join(map(str, left))} "
                     f"rank{'' if left == [1] else 's'}")
  failed = [f"2^{rows.bit_length() - 1} rows on {ranks} ranks "
            f"({', '.join(cell['failed'])})"
            for (rows, ranks), cell in sorted(cells.items())
            if "failed" in cell]
  said = ("Failed jobs (their logs are kept; a chain stops at its failed "
          "job, the next round starts afresh): " + "; ".join(failed) + ". "
          if failed else "")
  if not missing:
    return said + "Every size was measured on every rank count."
  return said + ("Not measured, because a rank would pass "
          f"{settings['process_limit_gib']:g} GiB or the job "
          f"{settings['job_limit_gib']:g} GiB (the bench assumes a rank's "
          f"peak is {settings['peak_factor_assumed']:g}x its share of rows "
          "and slots plus what a process holds without a table): "
          + "; ".join(missing) + ".")


def _is_bytes(cost):
  return cost in BYTES or cost.startswith("peak")


def _growth_cell(growth, cost):
  if growth is None:
    return "-", "-", "no figures"
  slope = growth["slope"] * PER
  slope_text = (f"{slope / MIB:,.1f} MiB" if _is_bytes(cost)
                else f"{slope:.3g} s")
  if growth["verdict"] == "flat":
    said = "flat"
    if cost == "step":
      said = "flat in the table (its work is the rows touched per update)"
  elif growth["verdict"] == "faster":
    said = (f"**faster than linear**: as rows^{growth['power']:.2f} between "
            "the two largest tables")
  else:
    said = "linear in the table"
  return slope_text, f"{growth['share']:.0%}", said


def growth_table(cells):
  """Each cost's line on each rank count (memory against the rows held,
  the others against the table's rows)."""
  lines = ["| cost | ranks | sizes | at the smallest | at the largest | "
           "slope per 2^20 rows | slope's share at the largest | growth |",
           "|---|---:|---:|---:|---:|---:|---:|---|"]
  rank_counts = sorted({ranks for _, ranks in cells})
  for cost, label in list(SECONDS.items()) + [
      ("peak_train", "peak memory, training"),
      ("checkpoint_bytes", BYTES["checkpoint_bytes"]),
      ("export_bytes", BYTES["export_bytes"])]:
    for ranks in rank_counts:
      xs, ys = figures.series(cells, cost, ranks)
      if not xs:
        continue
      growth = fit.growth(xs, ys)
      slope, share, said = _growth_cell(growth, cost)
      froms = {cells[(x, ranks)].get("reshard_from") for x in xs}
      named = (f"{label} from {', '.join(map(str, sorted(froms)))}"
               if cost == "reshard" and None not in froms else label)
      if _is_bytes(cost):
        low, high = _mib(ys[0]) + " MiB", _mib(ys[-1]) + " MiB"
      elif cost == "step":
        low, high = f"{ys[0] * 1000:.1f} ms", f"{ys[-1] * 1000:.1f} ms"
      else:
        low, high = f"{ys[0]:.2f} s", f"{ys[-1]:.2f} s"
      lines.append(f"| {named} | {ranks} | {len(xs)} | {low} | {high} | "
                   f"{slope} | {share} | {said} |")
  lines.append(f"| delta save (1 %, 10 % of rows touched) | - | - | - | - | "
               f"- | - | {NOT_BUILT} |")
  return "\n".join(lines)


def _where(cells, cost, ranks):
  """"on 4 ranks", or for a re-shard "from 2 ranks onto 4"."""
  if cost != "reshard":
    return f"on {ranks} rank{'s' * (ranks > 1)}"
  froms = sorted({cell["reshard_from"] for (_, n), cell in cells.items()
                  if n == ranks and "reshard_from" in cell})
  return (f"from {', '.join(map(str, froms))} "
          f"rank{'s' * (max(froms) > 1)} onto {ranks}")


def one_rank_said(cells):
  """How much more a checkpoint one rank saved costs to read: one
  process keeps each table whole in the Estimator's own checkpoint, the
  ranks in a merged one of slices."""
  widest = max(ranks for _, ranks in cells)
  said = []
  for cost, label in (("export", "an export"),
                      ("reshard", "a re-shard")):
    slopes = {}
    for ranks in sorted({n for _, n in cells}):
      growth = fit.growth(*figures.series(cells, cost, ranks))
      if growth and growth["points"] >= 2:
        slopes[ranks] = growth["slope"] * PER
    low = min(slopes, default=None)
    if low is None or low == widest or widest not in slopes:
      continue
    said.append(f"{label} {_where(cells, cost, low)} costs "
                f"{slopes[low]:.3g} s per 2^20 rows against "
                f"{slopes[widest]:.3g} s {_where(cells, cost, widest)} "
                f"({slopes[low] / slopes[widest]:.1f}x)")
  if not said:
    return ""
  return ("What a checkpoint one rank saved costs to read: " +
          "; ".join(said) + ". One process keeps each table whole in the "
          "Estimator's own checkpoint; ranks read blocks of rows from the "
          "merged checkpoint of their slices.")


def _gib(value):
  return f"{value / (1 << 30):,.1f}"


def _duration(seconds):
  if seconds >= 3600:
    return f"{seconds / 3600:.1f} h"
  if seconds >= 100:
    return f"{seconds / 60:.1f} min"
  return f"{seconds:.1f} s"


def plan_fields(cells, dimension):
  """The plan's assumptions and table."""
  figures_ = plans.plan(cells, dimension)
  if figures_ is None:
    missing = "Not enough sizes measured for the plan."
    return {"plan_assumptions": missing, "plan_table": "", "hosts_for": ""}
  a = figures_["assumptions"]
  ranks = a["ranks_of"]
  assumptions = "\n".join([
      f"- **The table**: {plans.IDS:,} ids x dimension {plans.DIMENSION}, "
      f"rows and Adagrad's slot in float32: {plans.row_bytes(plans.DIMENSION)}"
      f" bytes a row, {a['table_bytes'] / 1e9:,.0f} GB ({_gib(a['table_bytes'])}"
      " GiB) in all. One rank per host, each holding 1/hosts of the rows.",
      f"- **Per row, scaled by bytes**: every slope was measured at dimension"
      f" {dimension} ({plans.row_bytes(dimension)} bytes a row with its slot)"
      f" and is multiplied by {a['scale']:g}, the ratio of the rows' bytes.",
      f"- **Memory**: a process's peak over training, evaluation and export "
      f"is {_mib(a['base_bytes'])} MiB without a table plus "
      f"{a['bytes_per_row_held']:,.0f} bytes per row it holds (a line "
      f"through every size on {ranks['memory']} ranks, against the rows a "
      "rank holds): "
      f"**{a['headroom']:.2f}x** the {plans.row_bytes(dimension)} bytes of "
      "its rows and slots, the headroom a host needs over its share.",
      f"- **Full save**: every rank writes its own rows, and rank 0's merge "
      "renames their files (no row is copied), so a host saves its share. "
      f"This machine saved {a['save_bandwidth'] / MIB:,.0f} MiB/s of rows "
      f"and slots (the slope on {ranks['save']} ranks sharing its disk, "
      "into its page cache); "
      "each host is assumed to write its share at that rate, all at once.",
      f"- **Restore and re-shard**: every rank reads its own range of rows "
      "from the merged checkpoint; this machine restored "
      f"{a['restore_bandwidth'] / MIB:,.0f} MiB/s (slope on "
      f"{ranks['restore']} ranks), and each host is assumed to read its "
      "share at that rate from storage that serves all hosts at once. A "
      "restore's and a re-shard's seconds include the fitted line's "
      "intercept: the graph and session every start pays.",
      f"- **Export**: the chief writes the whole table's rows (not their "
      "slots) into the SavedModel a block at a time, alone, so its time "
      f"is the whole table's at the slope on {ranks['export']} ranks, "
      "however many hosts.",
      "- **Delta saves**: not built yet for tables over ranks, so not "
      "planned; until they are, every save costs the full save below."] + (
          [f"- **Caution**: {', '.join(a['faster'])} grew faster than "
           "linear between the two largest tables on those ranks, so the "
           "plan's line understates it at a billion ids."]
          if a["faster"] else []))
  lines = ["| hosts | rows per host | rows + slots per host GiB | peak memory"
           " per host GiB | full save | delta save | restore | re-shard | "
           "export | export size GB |",
           "|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
  for row in figures_["rows"]:
    lines.append(
        f"| {row['hosts']} | {row['rows_per_host']:,.0f} | "
        f"{_gib(row['table_bytes_per_host'])} | "
        f"{_gib(row['memory_per_host'])} | "
        f"{_duration(row['save_seconds'])} | {NOT_BUILT} | "
        f"{_duration(row['restore_seconds'])} | "
        f"{_duration(row['reshard_seconds'])} | "
        f"{_duration(row['export_seconds'])} | "
        f"{row['export_bytes'] / 1e9:,.0f} |")
  hosts_for = "; ".join(f"{count} hosts of {gib} GiB" for gib, count in
                        figures_["hosts_for"].items())
  return {"plan_assumptions": assumptions, "plan_table": "\n".join(lines),
          "hosts_for": ("The fewest hosts whose memory holds a share at "
                        f"that peak: {hosts_for}.")}


def run_line(result):
  m, s = result["machine"], result["settings"]
  return (
      f"Run {m['date']} on {m['summary']}, a machine shared with another "
      "engineer's tests, so every timing was taken on a busy machine: load "
      f"average at the start {', '.join(map(str, m['load_average_at_start']))}"
      f", at the end {', '.join(map(str, m.get('load_average_at_end', [])))}."
      f" One `es.sharded_embedding` table of dimension {s['dimension']} and a "
      f"logit, Adagrad, {s['batch']:,} ids per update over all ranks drawn "
      f"uniformly over the table, {s['steps']} updates per job, the step "
      f"time the median of the last {s['steps'] - s['warmup']}; evaluation "
      f"reads {s['eval_batches']} batches of {s['batch']:,}.")


def page(result):
  """The page's text; a placeholder where nothing was measured yet."""
  if not result or not result.get("sizes"):
    fields = dict.fromkeys(("costs_table", "rounds", "skipped",
                            "growth_table", "one_rank", "plan_assumptions",
                            "plan_table", "hosts_for"), "")
    fields["run"] = "Not measured yet: `make bench-table-costs`."
    return repo.fill_template(TEMPLATE, fields)
  cells = figures.table(result)
  dimension = result["settings"]["dimension"]
  return repo.fill_template(TEMPLATE, {
      "run": run_line(result),
      "costs_table": costs_table(cells, dimension),
      "rounds": rounds_line(cells),
      "skipped": skipped_line(cells, result["settings"]),
      "growth_table": growth_table(cells),
      "one_rank": one_rank_said(cells),
      **plan_fields(cells, dimension)})


def write(results=RESULTS, path=PAGE):
  """Renders the page from the saved results; returns its text."""
  text = page(repo.load_json(results))
  repo.write(path, text)
  return text

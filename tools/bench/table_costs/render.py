"""docs/TABLE_COSTS.md from results/table_costs.json and, for the delta
saves, docs/delta_saves_static.json (`make bench-delta-saves`).

The page states each cost's growth from the fitted lines (fit.py) and the
plan from their slopes (plan.py); nothing on it is typed by hand but the
template's prose, so a rerun of either bench rewrites every figure and
verdict. Delta saves come from their own bench, of the same table: a
delta's time is read from its own saves, between full ones.
"""
import os

from tools import repo
from tools.bench.table_costs import figures
from tools.bench.table_costs import fit
from tools.bench.table_costs import plan as plans

_HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(_HERE, "results", "table_costs.json")
RESULTS_PS = os.path.join(_HERE, "results", "table_costs_ps.json")
TEMPLATE = os.path.join(_HERE, "TABLE_COSTS.md.template")
PAGE = os.path.join(repo.DOCS, "TABLE_COSTS.md")
DELTAS = os.path.join(repo.DOCS, "delta_saves_static.json")
TOUCHED = (0.01, 0.1)
"""The fractions of the rows touched between saves the delta columns
show."""
MIB = 1 << 20
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


def _percent(touched):
  return f"{touched * 100:g} %"


def delta_runs(deltas):
  """{(rows, touched, ranks): run} of the delta saves bench."""
  return {(run["rows"], run["touched"], run.get("ranks", 1)): run
          for run in (deltas or {}).get("runs", [])}


def _delta(runs, rows, ranks, touched):
  run = runs.get((rows, touched, ranks))
  return "-" if run is None else f"{run['delta_s']:.3f}"


def _reshard(rows, n, cell):
  text = _seconds(cell, "reshard")
  if "reshard_from" in cell and text != "-":
    text += f" ({cell['reshard_from']})"
  return text


def _peaks(rows, n, cell):
  return " / ".join(_mib(cell.get(k, {}).get("value")) for k in (
      "peak_train", "peak_eval", "peak_export"))


def _cost(name):
  return lambda rows, n, cell: _seconds(cell, name)


def _size(name):
  return lambda rows, n, cell: _mib(cell.get(name, {}).get("value"))


def _table(cells, dimension, header, columns):
  """One line per size and count: rows, their bytes, the count, then
  `columns` (functions of rows, count and cell)."""
  lines = list(header)
  for (rows, n), cell in sorted(cells.items()):
    power = f"2^{rows.bit_length() - 1}"
    if "failed" in cell and "step" not in cell:
      lines.append(f"| {power} | - | {n} | failed "
                   f"({', '.join(cell['failed'])} job) |" +
                   " - |" * (len(columns) - 1))
      continue
    lines.append(
        f"| {power} | {plans.row_bytes(dimension) * rows / MIB:,.0f} | {n} | "
        + " | ".join(column(rows, n, cell) for column in columns) + " |")
  return "\n".join(lines)


def costs_table(cells, dimension, deltas=None):
  """One line per size and rank count, in that order."""
  runs = delta_runs(deltas)
  return _table(cells, dimension, [
      "| rows | rows + slot MiB | ranks | step | full save s | delta save "
      "1 % s | delta save 10 % s | restore s | re-shard s (from) | "
      "evaluation s | export s | peak MiB: train / eval / export | "
      "checkpoint MiB | export MiB |",
      "|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"],
      [_cost("step"), _cost("save"),
       lambda rows, n, cell: _delta(runs, rows, n, TOUCHED[0]),
       lambda rows, n, cell: _delta(runs, rows, n, TOUCHED[1]),
       _cost("restore"), _reshard, _cost("eval"), _cost("export"), _peaks,
       _size("checkpoint_bytes"), _size("export_bytes")])


def deltas_note(deltas):
  """Where the delta columns come from: another bench, of the same table."""
  runs = delta_runs(deltas)
  if not runs:
    return "Delta saves: not measured yet (`make bench-delta-saves`)."
  some = next(iter(runs.values()))["saves"]
  sizes = sorted({rows for rows, _, _ in runs})
  counts = sorted({ranks for _, _, ranks in runs})
  fulls = []
  for ranks in counts:
    said = ", ".join(f"2^{rows.bit_length() - 1} {run['full_s']:.2f} s"
                     for (rows, touched, n), run in sorted(runs.items())
                     if touched == TOUCHED[0] and n == ranks)
    fulls.append(f"on {ranks} rank{'s' * (ranks > 1)} {said}")
  return (
      "The delta save columns are the same sharded table's, in another "
      f"job: 2^{sizes[0].bit_length() - 1} to "
      f"2^{sizes[-1].bit_length() - 1} rows x {deltas['dimension']} with "
      f"Adagrad, in one process or over {', '.join(map(str, counts[1:]))} "
      f"Horovod ranks, a save every {deltas['steps_per_save']} updates, one "
      f"in {deltas['full_every']} full, each delta the median of "
      f"{len(some['delta'])} saves of one run in which 1 % or 10 % of the "
      "table's rows were looked up since the save before (`make "
      "bench-delta-saves`, [delta_saves_static.json]"
      "(delta_saves_static.json)); on ranks, rank 0's time for its own "
      "write, the wait for every rank's and the merge. "
      f"The {_percent(TOUCHED[0])} runs' own full saves, to set a delta "
      f"against: {'; '.join(fulls)}.")


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
  return cost in BYTES or "peak" in cost


def _growth_cell(growth, cost, touched=None):
  if growth is None:
    return "-", "-", "no figures"
  slope = growth["slope"] * PER
  slope_text = (f"{slope / MIB:,.1f} MiB" if _is_bytes(cost)
                else f"{slope:.3g} s")
  if growth["verdict"] == "flat":
    said = "flat"
    if cost == "step":
      said = "flat in the table (its work is the rows touched per update)"
    elif cost == "delta":
      said = "flat in the table"
  elif growth["verdict"] == "linear" and cost == "delta":
    said = (f"linear in the rows touched ({_percent(touched)} of the "
            "table, so it grows with the table here)")
  elif growth["verdict"] == "faster":
    said = (f"**faster than linear**: as rows^{growth['power']:.2f} between "
            "the two largest tables")
  else:
    said = "linear in the table"
  return slope_text, f"{growth['share']:.0%}", said


def delta_growths(deltas, per_rank=False):
  """{(touched, ranks): (rows, seconds, growth)} of the delta saves
  against the table's rows (or, `per_rank`, the rows a rank holds), fitted
  as every other cost."""
  runs = delta_runs(deltas)
  found = {}
  for touched, ranks in sorted({(t, n) for _, t, n in runs}):
    points = sorted((rows // ranks if per_rank else rows, run["delta_s"])
                    for (rows, t, n), run in runs.items()
                    if t == touched and n == ranks)
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    found[(touched, ranks)] = (xs, ys, fit.growth(xs, ys))
  return found


def growth_table(cells, deltas=None, unit="ranks"):
  """Each cost's line on each rank (or ps task) count, against the
  table's rows."""
  lines = [f"| cost | {unit} | sizes | at the smallest | at the largest | "
           "slope per 2^20 rows | slope's share at the largest | growth |",
           "|---|---:|---:|---:|---:|---:|---:|---|"]
  rank_counts = sorted({ranks for _, ranks in cells})
  for cost, label in list(SECONDS.items()) + [
      ("peak_train", "peak memory, training"),
      ("ps_peak", "peak memory of a ps task"),
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
  for (touched, ranks), (xs, ys, growth) in delta_growths(deltas).items():
    slope, share, said = _growth_cell(growth, "delta", touched)
    lines.append(f"| delta save, {_percent(touched)} of rows touched "
                 f"| {ranks} | {len(xs)} | "
                 f"{ys[0]:.3f} s | {ys[-1]:.3f} s | {slope} | {share} | "
                 f"{said} |")
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


def _delta_plan(row):
  if not row.get("delta_seconds"):
    return "-"
  return ", ".join(
      f"{_percent(touched)}: {_duration(seconds)}"
      for touched, seconds in row["delta_seconds"].items())


def plan_fields(cells, dimension, deltas=None):
  """The plan's assumptions and table."""
  measured = delta_growths(deltas, per_rank=True)
  widest = max((n for _, n in measured), default=None)
  growths = {t: g for (t, n), (_, _, g) in measured.items()
             if n == widest and g and g["points"] >= 2}
  figures_ = plans.plan(cells, dimension, deltas=growths or None,
                        deltas_dimension=(deltas or {}).get("dimension"))
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
      ("- **Delta saves**: every rank writes the rows of its share touched "
       "since the save before, and rank 0 merges the parts' index, so a "
       "host saves the touched rows of its share at the rate the delta "
       f"saves took on {widest} ranks (the line through them "
       "against the rows a rank holds, 1 % and 10 % of the rows touched "
       "between saves), its slope scaled by bytes as above; its intercept "
       "(the wait for every rank and the merge) is this machine's."
       if growths else
       "- **Delta saves**: not measured on ranks, so not planned.")]
      + (
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
        f"{_duration(row['save_seconds'])} | {_delta_plan(row)} | "
        f"{_duration(row['restore_seconds'])} | "
        f"{_duration(row['reshard_seconds'])} | "
        f"{_duration(row['export_seconds'])} | "
        f"{row['export_bytes'] / 1e9:,.0f} |")
  hosts_for = "; ".join(f"{count} hosts of {gib} GiB" for gib, count in
                        figures_["hosts_for"].items())
  return {"plan_assumptions": assumptions, "plan_table": "\n".join(lines),
          "hosts_for": ("The fewest hosts whose memory holds a share at "
                        f"that peak: {hosts_for}.")}


def ps_table(cells, dimension):
  """One line per size and count of ps tasks."""
  return _table(cells, dimension, [
      "| rows | rows + slot MiB | ps tasks | step | full save s | restore s "
      "| re-shard s (from) | evaluation s | export s | chief's peak MiB: "
      "train / eval / export | a ps task's peak MiB | checkpoint MiB | "
      "export MiB |",
      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"],
      [_cost("step"), _cost("save"), _cost("restore"), _reshard,
       _cost("eval"), _cost("export"), _peaks, _size("ps_peak"),
       _size("checkpoint_bytes"), _size("export_bytes")])


def ps_section(result):
  """The parameter-server chains' run, costs and growth, or a line saying
  they were not run."""
  if not result or not result.get("sizes"):
    return ("Not measured yet: `make bench-table-costs-ps`; "
            "`python -m tools.bench.ps_memory` measures a ps task's memory "
            "against its share of a table.")
  m, s = result["machine"], result["settings"]
  cells = figures.table(result)
  failed = [f"2^{rows.bit_length() - 1} rows on {n} ps tasks "
            f"({', '.join(cell['failed'])})"
            for (rows, n), cell in sorted(cells.items()) if "failed" in cell]
  return "\n\n".join([
      f"Run {m['date']} on {m['summary']}; load average at the start "
      f"{', '.join(map(str, m['load_average_at_start']))}, at the end "
      f"{', '.join(map(str, m.get('load_average_at_end', [])))}. The same "
      f"table ({s['dimension']} wide, Adagrad, {s['batch']:,} ids per "
      f"update, {s['steps']} updates per job) as a "
      "`tf.compat.v1.get_variable` the framework partitions over the ps "
      "tasks, trained asynchronously by a chief and a worker, in chains as "
      "above on 1, 2 and 4 ps tasks (a re-shard: a save of fewer ps tasks "
      "restored onto more, each part reading its slice). The seconds are "
      "the chief's as on the ranks (the evaluation runs on the ps tasks, "
      "the export is the chief's alone); a ps task's peak is its resident "
      "high-water mark over the whole job, read from /proc, the largest "
      f"task's. Rounds: {s['rounds']}.",
      ps_table(cells, s["dimension"]),
      ("Failed jobs: " + "; ".join(failed) + "." if failed else
       "Every job of every chain finished."),
      growth_table(cells, unit="ps tasks")])


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


def page(result, deltas=None, ps=None):
  """The page's text; a placeholder where nothing was measured yet.
  `deltas` is docs/delta_saves.json's content, `ps` the parameter-server
  chains' results, or None."""
  if not result or not result.get("sizes"):
    fields = dict.fromkeys(("costs_table", "deltas_note", "rounds",
                            "skipped",
                            "growth_table", "one_rank", "plan_assumptions",
                            "plan_table", "hosts_for"), "")
    fields["run"] = "Not measured yet: `make bench-table-costs`."
    fields["ps_section"] = ps_section(ps)
    return repo.fill_template(TEMPLATE, fields)
  cells = figures.table(result)
  dimension = result["settings"]["dimension"]
  return repo.fill_template(TEMPLATE, {
      "run": run_line(result),
      "costs_table": costs_table(cells, dimension, deltas),
      "deltas_note": deltas_note(deltas),
      "rounds": rounds_line(cells),
      "skipped": skipped_line(cells, result["settings"]),
      "growth_table": growth_table(cells, deltas),
      "one_rank": one_rank_said(cells),
      "ps_section": ps_section(ps),
      **plan_fields(cells, dimension, deltas)})


def write(results=RESULTS, path=PAGE, deltas=DELTAS, results_ps=RESULTS_PS):
  """Renders the page from the saved results; returns its text."""
  text = page(repo.load_json(results), repo.load_json(deltas),
              repo.load_json(results_ps))
  repo.write(path, text)
  return text

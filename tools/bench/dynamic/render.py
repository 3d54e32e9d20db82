"""docs/DYNAMIC.md from results/dynamic.json.

Speed ratios are the median over rounds of the ratio within a round (the
two tables ran one right after the other); memory per id is the
difference of two capacities' steady resident memory over the difference
of their rows, so what a process holds whatever its table cancels out.
"""
import math
import os
import statistics

from tools import repo
from tools.bench.perf.results import median
from tools.bench.perf.results import paired_ratios

_HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(_HERE, "results", "dynamic.json")
TEMPLATE = os.path.join(_HERE, "DYNAMIC.md.template")
PAGE = os.path.join(repo.DOCS, "DYNAMIC.md")
LABELS = {"hashed": "hashed (ids modulo the buckets)",
          "dynamic": "dynamic (`es.dynamic_embedding`)",
          "dynamic_min_count_2": "dynamic, `min_count=2`",
          "tfra": "TFRA 0.7.2 `dynamic_embedding` (own Estimator path)",
          "hashed_repeating": "hashed, ids repeating",
          "dynamic_repeating": "dynamic, ids repeating"}
TARGETS = {"auc_gain": 0.002, "rows_cut": 0.5, "auc_cost": 0.0005,
           "step_ratio": 1.3, "bytes_factor": 1.5, "stream_band": 0.1,
           "tfra_auc": 0.001, "tfra_speed": 1.0}
MIB = 1 << 20
TFRA_INSTALL = "pip install --no-deps tensorflow-recommenders-addons==0.7.2"
CUT_COMMAND = "nice -n 10 .venv/bin/python -m tools.bench.dynamic --parts=cut"
RESHARD_COMMAND = "nice -n 10 .venv/bin/python -m tools.bench.dynamic.reshard"


def _median_of(runs, key):
  return median([run and run[key] for run in runs])


def quality_rows(quality):
  """{name: (median AUC, median rows in use)} of each configuration."""
  return {name: (_median_of(runs, "auc"), _median_of(runs, "rows_in_use"))
          for name, runs in quality.items()}


def verdict(met):
  return "met" if met else "**not met**"


def _aucs(runs):
  return ", ".join(repo.fmt(run and run["auc"], 4) for run in runs)


def quality_fields(result):
  rows = quality_rows(result["quality"])
  hashed_auc = rows["hashed"][0]
  seeds = max(len(runs) for runs in result["quality"].values()) > 1
  lines = ["| table | AUC (eval) | - hashed | rows in use | examples/s |"
           + (" AUC per seed |" if seeds else ""),
           "|---|---:|---:|---:|---:|" + ("---|" if seeds else "")]
  for name, (auc, used) in rows.items():
    rate = median([run and run["examples"] / run["seconds"]
                   for run in result["quality"][name]])
    gain = "-" if name == "hashed" or None in (auc, hashed_auc) else (
        f"{auc - hashed_auc:+.4f}")
    lines.append(f"| {LABELS[name]} | {repo.fmt(auc, 4)} | {gain} | "
                 f"{'all' if used is None else f'{used:,}'} | "
                 f"{repo.fmt(rate)} |"
                 + (f" {_aucs(result['quality'][name])} |" if seeds else ""))
  dynamic_auc, dynamic_rows = rows["dynamic"]
  min2_auc, min2_rows = rows["dynamic_min_count_2"]
  if None in (hashed_auc, dynamic_auc, min2_auc, dynamic_rows, min2_rows):
    return {"quality_table": "\n".join(lines),
            "quality_verdict": "A quality run failed: no verdict."}
  gain = dynamic_auc - hashed_auc
  said = (
      f"AUC(dynamic) - AUC(hashed) = {gain:+.4f} (target >= "
      f"+{TARGETS['auc_gain']}: {verdict(gain >= TARGETS['auc_gain'])}). "
      + min_count_said(rows["dynamic"], rows["dynamic_min_count_2"]))
  full = result["settings"]["rows"] * len(result["settings"]["columns"])
  if min2_rows == dynamic_rows == full:
    said += (" Both dynamic runs fill every row: at this capacity "
             "`min_count=2` changes which ids hold the rows (those seen "
             "twice), not how many; a cut in rows shows only where the "
             "capacity exceeds the ids seen twice.")
  if result.get("cut") is not None:
    said += (" Here the ids seen twice outnumber the rows; the next "
             "section judges the cut at a capacity above them.")
  tfra_auc = rows.get("tfra", (None,))[0]
  if tfra_auc is not None:
    off = dynamic_auc - tfra_auc
    said += (f" Against TFRA: AUC(dynamic) - AUC(TFRA) = {off:+.4f} "
             f"(target within {TARGETS['tfra_auc']}: "
             f"{verdict(abs(off) <= TARGETS['tfra_auc'])}).")
    pairs = [(d["auc"] - t["auc"]) for d, t in zip(
        result["quality"]["dynamic"], result["quality"]["tfra"]) if d and t]
    if len(pairs) > 1:
      said += (" Seed by seed (the same seed draws both models' dense "
               "layers): " + ", ".join(f"{p:+.4f}" for p in pairs) + ".")
  return {"quality_table": "\n".join(lines), "quality_verdict": said}


def min_count_said(dynamic, min2):
  """The sentence on min_count=2's cut in rows and its AUC cost, from the
  (AUC, rows in use) of each run."""
  cut = 1.0 - min2[1] / dynamic[1]
  cost = dynamic[0] - min2[0]
  return (
      f"`min_count=2` holds {cut:.1%} fewer rows (target >= "
      f"{TARGETS['rows_cut']:.0%}: {verdict(cut >= TARGETS['rows_cut'])}) "
      f"at an AUC cost of {cost:+.4f} (negative: a gain; target <= "
      f"{TARGETS['auc_cost']}: "
      f"{verdict(cost <= TARGETS['auc_cost'])}).")


def cut_fields(result):
  """The row cut's run, table and verdict (min_count 1 and 2 at a capacity
  above the ids seen twice)."""
  cut = result.get("cut")
  if cut is None:
    return {"cut_run": f"Not measured yet: `{CUT_COMMAND}`.",
            "cut_table": "", "cut_verdict": ""}
  columns = len(result["settings"]["columns"])
  capacity = cut["rows"] * columns
  m = cut["machine"]
  run = (f"Run {m['date']} (load average at the start "
         f"{', '.join(map(str, m['load_average_at_start']))}, at the end "
         f"{', '.join(map(str, m['load_average_at_end']))}), on the data "
         f"above: {cut['rows']:,} rows per column ({capacity:,} in all), "
         f"where a column's {cut['train']:,} training examples hold "
         f"{cut['distinct']:,} distinct ids, {cut['seen_twice']:,} of them "
         "seen at least twice (means over the columns). With "
         "`min_count=1` the table fills and evicts (LRU); with "
         "`min_count=2` it holds the ids seen twice and the ids the "
         "count-min sketch admits early.")
  rows = quality_rows(cut["runs"])
  lines = ["| table | AUC (eval) | rows in use | of the capacity | "
           "examples/s |", "|---|---:|---:|---:|---:|"]
  for name, (auc, used) in rows.items():
    rate = median([r and r["examples"] / r["seconds"]
                   for r in cut["runs"][name]])
    share = "-" if used is None else f"{used / capacity:.1%}"
    lines.append(f"| {LABELS[name]} | {repo.fmt(auc, 4)} | "
                 f"{repo.fmt(used)} | {share} | {repo.fmt(rate)} |")
  if None in (*rows["dynamic"], *rows["dynamic_min_count_2"]):
    said = "A row-cut run failed: no verdict."
  else:
    said = min_count_said(rows["dynamic"], rows["dynamic_min_count_2"])
  return {"cut_run": run, "cut_table": "\n".join(lines),
          "cut_verdict": said}


def reshard_fields(result):
  """What re-sharding a table into another number of ranks cost
  (reshard.py)."""
  figures = result.get("reshard")
  if figures is None:
    return {"reshard": f"Not measured yet: `{RESHARD_COMMAND}`."}
  before, after = figures["ranks"]

  def times(values):
    return ", ".join(f"{v:.2f}" for v in values)
  seconds = figures["seconds"]
  took = "n/a" if seconds is None else f"{seconds:.2f} s"
  return {"reshard": (
      f"Run {figures['machine']['date']} (load average as it ended "
      f"{', '.join(map(str, figures['machine']['load_average_at_start']))})"
      f": a table of {figures['capacity']:,} rows, dimension "
      f"{figures['dimension']}, Adagrad, {figures['ids']:,} ids, saved by "
      f"{before} Horovod ranks and restored into {after}. The re-shard "
      f"(every row to its owner among {after}) took {took} on rank 0. Each "
      f"rank's peak resident memory from its session's start to its first "
      f"update rose by {times(figures['peak_over_share'])} times its share "
      f"of the table ({figures['share_bytes'] / MIB:,.1f} MiB: rows, slot "
      "and per-row counters), restore and re-shard together; a restore "
      f"alone ({after} ranks restoring their own save) rose by "
      f"{times(figures['restore_only_peak_over_share'])} times.")}


def step_ratios(speed, base="hashed", dynamic="dynamic"):
  """`dynamic`'s step time over `base`'s, per round (same batch, so the
  ratio of base's examples/s to dynamic's)."""
  rates = {name: [run and run["examples_per_sec"] for run in runs]
           for name, runs in speed.items()}
  return paired_ratios(rates[base], rates[dynamic])


def speed_fields(result):
  lines = ["| table | examples/s (median) | per round |", "|---|---:|---|"]
  for name, runs in result["speed"].items():
    rates = [run and run["examples_per_sec"] for run in runs]
    cells = ", ".join("failed" if r is None else repo.fmt(r) for r in rates)
    lines.append(f"| {LABELS[name]} | {repo.fmt(median(rates))} | {cells} |")
  ratios = step_ratios(result["speed"])
  if not ratios:
    return {"speed_table": "\n".join(lines),
            "speed_verdict": "A speed run failed: no ratio."}
  mid = median(ratios)
  churn = [run["evicted_per_update"] for run in result["speed"]["dynamic"]
           if run and "evicted_per_update" in run]
  said = ""
  if churn:
    said = (f"On this stream each column's table evicts {median(churn):,.0f} "
            "ids an update on average over the run (and admits as many "
            f"once full), of the {result['settings']['batch']:,} it looks "
            "up. ")
  said += (f"Step time, dynamic / hashed: {mid:.2f}x (per round "
          f"{', '.join(f'{r:.2f}' for r in ratios)}; target <= "
          f"{TARGETS['step_ratio']}x: {verdict(mid <= TARGETS['step_ratio'])}"
          ").")
  against_tfra = step_ratios(result["speed"], "tfra") if (
      "tfra" in result["speed"]) else []
  if against_tfra:
    speedup = median([1.0 / r for r in against_tfra])
    said += (f" Examples/s, dynamic / TFRA: {speedup:.2f}x (target >= "
             f"{TARGETS['tfra_speed']}x: "
             f"{verdict(speedup >= TARGETS['tfra_speed'])}).")
  repeating = step_ratios(result["speed"], "hashed_repeating",
                          "dynamic_repeating") if (
                              "dynamic_repeating" in result["speed"]) else []
  if repeating:
    said += (" On ids that repeat (each column folded to "
             f"{result['settings']['repeating']:,} ids, which all hold a row "
             "after the first updates: no admission, no eviction), dynamic "
             "/ hashed: "
             f"{median(repeating):.2f}x (per round "
             f"{', '.join(f'{r:.2f}' for r in repeating)}): what the table's "
             "lookups and bookkeeping cost, the rest of the ratio above "
             "being its admissions and evictions.")
  return {"speed_table": "\n".join(lines), "speed_verdict": said}


def stream(run):
  """(resident at the update that first fills the table, steady: median
  after it, peak after it, largest relative move from the fill's)."""
  filled = math.ceil(run["rows_in_use"] / run["batch"]) - 1
  after = run["resident"][filled:]
  at_fill = after[0]
  return (at_fill, statistics.median(after), max(after),
          max(abs(r - at_fill) for r in after) / at_fill)


def bytes_bound(dimension, slots):
  """The target per admitted id: 1.5 x (an 8-byte id + the row and its
  optimizer slots in float32)."""
  return TARGETS["bytes_factor"] * (8 + 4 * dimension * (1 + slots))


def memory_fields(result):
  runs = result["memory"]
  if None in runs:
    return {"memory_table": "",
            "memory_verdict": "A memory run failed: no figure."}
  lines = ["| capacity (rows in use) | resident at fill, MiB | steady | peak "
           "| largest move after fill |", "|---:|---:|---:|---:|---:|"]
  figures = [stream(run) for run in runs]
  for run, (fill, steady, peak, move) in zip(runs, figures):
    lines.append(f"| {run['rows_in_use']:,} | {fill / MIB:,.1f} | "
                 f"{steady / MIB:,.1f} | {peak / MIB:,.1f} | {move:.1%} |")
  rows = runs[1]["rows_in_use"] - runs[0]["rows_in_use"]
  steady_per_id = (figures[1][1] - figures[0][1]) / rows
  peak_per_id = (figures[1][2] - figures[0][2]) / rows
  bound = bytes_bound(runs[0]["dimension"], runs[0]["slots"])
  band = max(move for *_, move in figures)
  said = (
      f"Resident bytes per admitted id: {steady_per_id:,.0f} steady, "
      f"{peak_per_id:,.0f} peak (d = {runs[0]['dimension']}, Adagrad: "
      f"{runs[0]['slots']} slot; target <= {bound:,.0f}: "
      f"{verdict(max(steady_per_id, peak_per_id) <= bound)}). A stream of "
      f"new ids 10x the capacity moves resident memory at most {band:.1%} "
      f"after the table first fills (target within "
      f"+-{TARGETS['stream_band']:.0%}: "
      f"{verdict(band <= TARGETS['stream_band'])}).")
  return {"memory_table": "\n".join(lines), "memory_verdict": said}


def tfra_line(version):
  if version is None:
    return ("Skipped: tensorflow-recommenders-addons is not installed here "
            f"(`{TFRA_INSTALL}`, or the `bench` extra of setup.py).")
  return (f"tensorflow-recommenders-addons {version}: its rows are in the "
          "tables above. The same network, data, batch, dimension and "
          "Adagrad, through TFRA's own path (tools/bench/dynamic/"
          "tfra_model.py: a plain `tf.estimator.Estimator` whose model_fn "
          "looks up `de.get_variable` tables with `de.embedding_lookup_unique`"
          " and minimises through `de.DynamicEmbeddingOptimizer`). TFRA's "
          "tables have no capacity and no admission: they hold every id "
          "trained on, so they use more memory than either table here.")


def rerun_line(result, part):
  """The date and load of `part` where it was re-run alone, else ""."""
  m = result.get(f"{part}_machine")
  if m is None:
    return ""
  where = ("" if m["summary"] == result["machine"]["summary"]
           else f" on {m['summary']}")
  return (f"Re-run alone {m['date']}{where} (load average at the start "
          f"{', '.join(map(str, m['load_average_at_start']))}, at the end "
          f"{', '.join(map(str, m['load_average_at_end']))}).\n\n")


def run_fields(result):
  m, s = result["machine"], result["settings"]
  line = (f"Run {m['date']} on {m['summary']}, a machine shared with other "
          "engineers' jobs, so every timing was taken on a busy machine: "
          "load average at the start "
          f"{', '.join(map(str, m['load_average_at_start']))}, at the end "
          f"{', '.join(map(str, m['load_average_at_end']))}.")
  if result["smoke"]:
    line = ("**Shorter than the defaults** (`--smoke` or smaller flags): "
            "figures show the bench works, not what it measures.\n\n" + line)
  data = (f"{s['train']:,} training and {s['eval']:,} eval examples of "
          f"`click_data` with `raw_ids` (Zipf exponent {s['zipf_exponent']}),"
          f" {len(s['columns'])} columns ({', '.join(s['columns'])}): "
          f"{result['distinct_ids']:,} distinct ids over both splits. "
          f"{s['rows']:,} rows per column in either table, dimension "
          f"{s['dimension']}, batch {s['batch']}, Adagrad 0.05; speed: "
          f"{s['speed_steps']} timed updates after 20 untimed.")
  return {"run": line, "data": data}


def page(result):
  """The page's text (None: not measured yet)."""
  if result is None:
    missing = "Not measured yet: `make bench-dynamic`."
    fields = dict.fromkeys(
        ("run", "data", "quality_table", "quality_verdict", "speed_table",
         "speed_verdict", "memory_table", "memory_verdict", "cut_table",
         "cut_verdict"), "")
    fields.update(run=missing, tfra=tfra_line(None), cut_run=missing,
                  reshard=missing)
  else:
    fields = {**run_fields(result), **quality_fields(result),
              **speed_fields(result), **memory_fields(result),
              **cut_fields(result), **reshard_fields(result),
              "tfra": tfra_line(result["tfra"])}
    for part in ("quality", "speed", "memory"):
      fields[f"{part}_table"] = (rerun_line(result, part) +
                                 fields[f"{part}_table"])
  return repo.fill_template(TEMPLATE, fields)


def write(results=RESULTS, path=PAGE):
  """Renders the page from the saved results; returns its text."""
  text = page(repo.load_json(results))
  repo.write(path, text)
  return text

"""docs/PERFORMANCE.md from bench.json: the table, machine, closing note.

Rendering reads only a bench.json's rows (and the Horovod knobs' JSON), so
`--rerender` rewrites the page from saved results without running anything,
and a change to the prose in notes.py reaches the page without a new run.
"""
import json
import os

from tools.bench import network_notes
from tools.bench import notes
from tools.bench import variants

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
KNOBS_JSON = os.path.join(ROOT, "docs", "horovod_knobs.json")
_SIGN = {variants.AT_LEAST: "≥", variants.AT_MOST: "≤"}


def fmt(value, digits=3):
  """A figure as the page writes it: thousands whole, smaller 3 digits."""
  if value is None:
    return "n/a"
  if abs(value) >= 100:
    return f"{value:,.0f}"
  return f"{value:.{digits}g}"


def _target(row):
  """The target cell, e.g. ≥ 0.97 or ≤ 1.5.

  A row without a direction reads as AT_LEAST, so that a bench.json written
  before rows had one still renders (every such row was AT_LEAST).
  """
  if row["target"] is None:
    return "-"
  return f"{_SIGN[row.get('direction', variants.AT_LEAST)]} {row['target']:g}"


def _verdict(row):
  if row["met"] is None:
    return "n/a (failed)" if row["target"] is not None else "-"
  return "met" if row["met"] else "**MISSED**"


def _noise_note(row):
  samples = row["ratio_samples"]
  if samples and min(samples) < row["target"] <= max(samples):
    return ("no cause found beyond this host's noise: the per-round ratios "
            "fall on both sides of the target.")
  return "no analysis recorded for this row."


def _startup_floor(rows):
  """The floor this run's own rates put under row 6a's ratio, or "".

  Rows 6a (whole-process seconds) and 6d (examples/sec after the first
  update) of the same run give it; a bench.json without 6d has none.
  """
  k, micro = variants.STARTUP_K, variants.STARTUP_MICRO
  updates = variants.STARTUP_UPDATES
  by_id = {row["id"]: row for row in rows}
  whole, rate = by_id["6a"], by_id.get("6d")
  if not rate or None in (whole["peer_median"], rate["ours_median"],
                          rate["peer_median"]):
    return ""
  compute_k = updates * k * micro / rate["ours_median"]
  compute_1 = updates * micro / rate["peer_median"]
  floor = (whole["peer_median"] - compute_1 + compute_k) / whole["peer_median"]
  return (
      f" In this run: at the rates of row 6d ({fmt(rate['ours_median'])} "
      f"examples/sec at k={k}, {fmt(rate['peer_median'])} at k=1) that "
      f"compute takes about {compute_k:.1f} s against {compute_1:.1f} s, so "
      f"even if nothing else grew with k, the k={k} run would take about "
      f"k=1's {whole['peer_median']:.1f} s - {compute_1:.1f} s + "
      f"{compute_k:.1f} s: a ratio of about {floor:.2f} at best.")


# Rows whose reason goes on with figures of the run being rendered.
_RUN_FIGURES = {"6a": _startup_floor}


def _explanation(row, rows):
  """Why a row missed: its notes.EXPLANATIONS entry, else the noise note."""
  why = notes.EXPLANATIONS.get(row["id"])
  if why is None:
    return _noise_note(row)
  figures = _RUN_FIGURES.get(row["id"])
  return why + figures(rows) if figures else why


def markdown(result):
  """docs/PERFORMANCE.md: table, machine, how to reproduce, closing note."""
  machine = result["machine"]
  rows = result["rows"]
  lines = [
      "# Performance", "",
      "Written by `make bench` (`tools/bench/`); bench.json holds the same "
      "rows. Each ratio is ours / peer, the median over rounds of the ratio "
      "taken within a round (both sides alternate, one fresh process per "
      "measurement); the medians are the examples/sec (or MiB, or seconds) "
      "behind it, and `per round` lists the within-round ratios in round "
      "order. A ≥ target is met at or above it, a ≤ target at or below. "
      "`shortest window` is the shortest timed window (seconds) of any "
      "measurement behind a throughput row.",
      "", f"Run {machine['date']} on {machine['summary']}.", "",
      "| row | what | ours (median) | peer (median) | ratio | per round | "
      "target | result | cores/process ours, peer | shortest window |",
      "|---|---|---|---|---|---|---|---|---|---|"]
  for row in rows:
    unit = variants.SHORT_UNIT[row["unit"]]
    window = row.get("shortest_window_seconds")
    if window is None or row["unit"] != variants.EPS:
      window = "-"
    else:
      window = f"{window:.1f} s"
    lines.append(
        f"| {row['id']} | {row['name']} | {fmt(row['ours_median'])} {unit} "
        f"| {fmt(row['peer_median'])} {unit} | {fmt(row['ratio'])} "
        f"| {', '.join(fmt(r) for r in row['ratio_samples']) or '-'} "
        f"| {_target(row)} | {_verdict(row)} "
        f"| {fmt(row['ours_cores_per_process'], 2)}, "
        f"{fmt(row['peer_cores_per_process'], 2)} | {window} |")
  lines += ["", "## Machine", ""]
  lines += [f"- {k}: {v}" for k, v in sorted(machine.items())]
  lines += ["", "## Reproduce", "",
            "```", "make bench   # = .venv/bin/python -m tools.bench "
            "--out bench.json --markdown docs/PERFORMANCE.md", "```", "",
            "Rounds: " + str(result["rounds"]) + "; variants and step counts "
            "are `VARIANTS` in tools/bench/variants.py; the peers are in "
            "tools/bench/peers/ (each module says why it is the fair peer). "
            "Per-measurement logs go to the directory printed at the start. "
            "`--rerender bench.json` rewrites this page from saved results.",
            "", "## Closing note", ""]
  missed = [r for r in rows if r["met"] is False]
  failed = [r for r in rows if r["target"] is not None and r["met"] is None]
  if not missed and not failed:
    lines.append("Every target was met in this run.")
  for row in missed + failed:
    why = _explanation(row, rows)
    state = "missed" if row["met"] is False else "not measured (runs failed)"
    rounds = ", ".join(fmt(r) for r in row["ratio_samples"]) or "none"
    lines.append(f"- **{row['id']}** {state} (ratio {fmt(row['ratio'])}, "
                 f"target {_target(row)}; per round: {rounds}): {why}")
  lines += ["", "## Horovod knobs", ""] + horovod_knobs_lines()
  lines += ["", "## Over a network", "", notes.NETWORK,
            "", network_notes.WHAT_A_LINK_STANDS_FOR]
  lines += ["", "## GPU rows", "", notes.GPU_ROWS]
  lines += ["", "## Method", ""] + [f"- {note}" for note in notes.METHOD]
  return "\n".join(lines) + "\n"


def horovod_knobs_lines(path=KNOBS_JSON):
  """The Horovod settings' section, from tools/horovod_knobs.py's JSON."""
  if not os.path.exists(path):
    return ["Not measured on this host yet: `python tools/horovod_knobs.py`."]
  with open(path, encoding="utf-8") as f:
    knobs = json.load(f)
  lines = [
      f"`python tools/horovod_knobs.py` ({knobs['rounds']} interleaved "
      f"rounds): resnet20 through the CLI, {knobs['examples_per_replica']} "
      f"examples per replica per update, 1 intra-op thread per process, "
      f"{knobs['updates']} updates; the CLI's own examples/sec, median over "
      "rounds, and the ratio to 1 process taken within each round. "
      "\"Framework defaults\" binds each rank to its share of the cores and "
      "sets HOROVOD_CYCLE_TIME=5; each other Horovod row changes one thing "
      "(the last, both back to Horovod's own).", "",
      "| variant | examples/sec | x 1 process | per round |",
      "|---|---|---|---|"]
  for row in knobs["rows"]:
    lines.append(
        f"| {row['variant']} | {fmt(row['examples_per_sec'])} | "
        f"{fmt(row['ratio_to_1_process'])} | "
        f"{', '.join(fmt(r) for r in row['ratios_per_round'])} |")
  lines += ["", "Probes of knobs whose code was not kept (the same setup, 2 "
            "rounds, ratio to 1 process per round):", ""]
  return lines + [f"- {probe}" for probe in notes.HOROVOD_PROBES]


def rerender(bench_json, markdown_path):
  """Rewrites `markdown_path` from a saved bench.json; runs nothing."""
  with open(bench_json, encoding="utf-8") as f:
    write(markdown_path, markdown(json.load(f)))


def write(path, text):
  """Writes `text` to `path` (none: nothing), making its folder."""
  if path:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
      f.write(text)

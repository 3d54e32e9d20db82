"""docs/BENCH.md from results/bench.json, through the page's template.

Rendering reads only a bench.json's rows (and the Horovod knobs' JSON), so
`--rerender` rewrites the page from saved results without running anything.
The prose is BENCH.md.template's and explanations.md's (why a row can
miss); this module computes every figure the page shows from the JSON.
"""
import json
import os
import re

from tools import repo
from tools.bench.network import analysis
from tools.bench.network import links
from tools.bench.network import scaling_model
from tools.bench.perf import variants

_HERE = os.path.dirname(os.path.abspath(__file__))
BENCH_JSON = os.path.join(_HERE, "results", "bench.json")
KNOBS_JSON = os.path.join(_HERE, "results", "horovod_knobs.json")
PAGE = os.path.join(repo.DOCS, "BENCH.md")
TEMPLATE = os.path.join(_HERE, "BENCH.md.template")
EXPLANATIONS = os.path.join(_HERE, "explanations.md")
# The network page's paragraph on what a shaped link stands for, which this
# page repeats under "Over a network", and the network bench's allreduce
# runs, whose calibration it quotes.
_NETWORK = os.path.join(os.path.dirname(_HERE), "network")
LINK_TEXT = os.path.join(_NETWORK, "link.md")
ALLREDUCE_JSON = os.path.join(_NETWORK, "results", "allreduce.json")
# The row whose lone process is the paragraph's one core of this host.
LINK_ROW = "4a"
_SIGN = {variants.AT_LEAST: "≥", variants.AT_MOST: "≤"}
# The templates' startup figures: variants.py's, not the prose's.
STARTUP_FIELDS = {
    "startup_k": variants.STARTUP_K, "startup_micro": variants.STARTUP_MICRO,
    "startup_updates": variants.STARTUP_UPDATES,
    "startup_examples": variants.STARTUP_K * variants.STARTUP_MICRO,
    "startup_timeout": variants.TIMEOUT_S["startup_k64"]}

fmt = repo.fmt


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


def explanations(path=EXPLANATIONS):
  """{row id: why it can miss}, from explanations.md's sections.

  A section's heading lists the row ids its paragraph explains; the
  startup figures in it are filled from variants.py.
  """
  with open(path, encoding="utf-8") as f:
    text = re.sub(r"<!--.*?-->", "", f.read(), flags=re.S)
  out = {}
  for section in text.split("\n## ")[1:]:
    heading, _, body = section.partition("\n")
    why = repo.fill_text(" ".join(body.split()), STARTUP_FIELDS)
    out.update((row_id.strip(), why) for row_id in heading.split(","))
  return out


def _explanation(row, rows):
  """Why a row missed: its explanations.md entry, else the noise note."""
  why = explanations().get(row["id"])
  if why is None:
    return _noise_note(row)
  figures = _RUN_FIGURES.get(row["id"])
  return why + figures(rows) if figures else why


def _table(rows):
  lines = [
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
  return lines


def _closing_note(rows):
  missed = [r for r in rows if r["met"] is False]
  failed = [r for r in rows if r["target"] is not None and r["met"] is None]
  if not missed and not failed:
    return ["Every target was met in this run."]
  lines = []
  for row in missed + failed:
    why = _explanation(row, rows)
    state = "missed" if row["met"] is False else "not measured (runs failed)"
    rounds = ", ".join(fmt(r) for r in row["ratio_samples"]) or "none"
    lines.append(f"- **{row['id']}** {state} (ratio {fmt(row['ratio'])}, "
                 f"target {_target(row)}; per round: {rounds}): {why}")
  return lines


def _ms(seconds, digits):
  return "n/a" if seconds is None else f"{seconds * 1e3:.{digits}f}"


def link_text(result, allreduce_result):
  """The paragraph on what a shaped link stands for, its figures filled:
  one core's resnet20 update from `result`'s row 4a (a bench.json), the
  fixed costs from the allreduce runs' calibration; either None where it
  is not measured yet."""
  row = {r["id"]: r for r in result["rows"]}.get(LINK_ROW) if result else None
  rate = row and row["peer_median"]
  update = rate and variants.VARIANTS[row["peer"]][2]["batch"] / rate
  fit = (analysis.calibration(allreduce_result)
         if allreduce_result is not None else {})
  speedup = scaling_model.GPU_SPEEDUP
  cycle = scaling_model.DEFAULT_CYCLE_S
  with open(LINK_TEXT, encoding="utf-8") as f:
    return repo.fill_text(f.read().strip(), {
        "gpu_speedup": speedup,
        "update_ms": _ms(update, 0), "single_eps": fmt(rate),
        "gpu_100mbit": f"{links.bits_per_second('100mbit') * speedup / 1e9:g}",
        "gpu_1gbit": f"{links.bits_per_second('1gbit') * speedup / 1e9:g}",
        "horovod_overhead_ms": _ms(fit.get("overhead_s"), 1),
        "ring_step_ms": _ms(fit.get("latency_s"), 2),
        "collective_overhead_ms": _ms(fit.get("collective_overhead_s"), 1),
        "half_cycle_ms": f"{cycle / 2 * 1e3:g}",
        "cycle_ms": f"{cycle * 1e3:g}"})


def markdown(result, knobs_path=KNOBS_JSON, allreduce_path=ALLREDUCE_JSON):
  """docs/BENCH.md: table, machine, how to reproduce, closing note."""
  machine = result["machine"]
  return repo.fill_template(TEMPLATE, dict(
      STARTUP_FIELDS, date=machine["date"], summary=machine["summary"],
      table="\n".join(_table(result["rows"])),
      machine="\n".join(f"- {k}: {v}" for k, v in sorted(machine.items())),
      rounds=result["rounds"],
      closing_note="\n".join(_closing_note(result["rows"])),
      horovod_knobs="\n".join(horovod_knobs_lines(knobs_path)),
      what_a_link_stands_for=link_text(result,
                                       repo.load_json(allreduce_path))))


def horovod_knobs_lines(path=KNOBS_JSON):
  """The Horovod settings' section, from tools/horovod_knobs.py's JSON."""
  if not os.path.exists(path):
    return ["Not measured on this host yet: "
            "`python -m tools.bench.perf.horovod_knobs`."]
  with open(path, encoding="utf-8") as f:
    knobs = json.load(f)
  lines = [
      f"`python -m tools.bench.perf.horovod_knobs` ({knobs['rounds']} "
      "interleaved "
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
  return lines


def rerender(bench_json=BENCH_JSON, markdown_path=PAGE):
  """Rewrites `markdown_path` from a saved bench.json; runs nothing."""
  with open(bench_json, encoding="utf-8") as f:
    repo.write(markdown_path, markdown(json.load(f)))

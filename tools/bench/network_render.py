"""docs/NETWORK.md and docs/network_scaling.png from the network bench's JSON.

Reads docs/network.json (training rows) and docs/network_allreduce.json
(allreduce-only runs) and nothing else, so `python -m tools.bench.network
render` redraws both from saved results; either file may be missing, and
its sections then say how to make it. Predictions come from
tools/scaling_model.py with the compute the rows measured.
"""
import dataclasses
import json
import os

from tools import scaling_model
from tools.bench import links
from tools.bench import network_allreduce
from tools.bench import network_notes
from tools.bench import network_rows
from tools.bench import render
from tools.bench.results import median

COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")
PREDICT_HOSTS = (8, 16, 32, 64, 128)
PREDICT_GBITS = (10, 100)


def _load(path):
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def recalibrate(rows_result, allreduce_result):
  """Gives the rows the allreduce runs' calibration, the one source of the
  model's network inputs (the rows keep the one they were sized with only
  until the page is drawn)."""
  fit = network_allreduce.calibration(allreduce_result)
  rows_result["calibration"] = fit
  rows_result["recipes"] = {
      v: dataclasses.asdict(network_rows.recipe(v, fit))
      for v in rows_result["recipes"]}


def _recipe(result, variant):
  return scaling_model.Recipe(**result["recipes"][variant])


def compute_s(result, model):
  """Seconds of one micro-batch update on one process: the baselines' median."""
  rate = median([m and m["examples_per_sec"]
                 for m in result["samples"][model]["single"]])
  return None if rate is None else result["micro_batch"] / rate


def _link(result, rate):
  fit = result["calibration"]
  return links.link(rate, fit["latency_s"], fit["unshaped_bandwidth"],
                    links.cpu_share(result["hosts"],
                                    result["machine"]["cores"]))


def _per_micro_batch(result, measurement, exchange_s=0.0):
  """Seconds of one micro-batch on one process of `measurement`, its
  update's `exchange_s` left out (None where it failed)."""
  if measurement is None:
    return None
  k = measurement.get("accumulation_steps", 1)
  processes = measurement.get("processes", 1)
  update = (k * result["micro_batch"] * processes /
            measurement["examples_per_sec"])
  return (update - exchange_s) / k


def compute_rounds(result, model):
  """Per round, the model's compute inputs: {"alone": one process's update
  of one micro-batch, "lone": its (compute per micro-batch, apply per
  update), and per exchange the same pair for a rank in a 2-host job with
  that exchange}, None where a measurement it needs failed.

  One process at k = 1 and k = IN_JOB_K splits its time into compute and
  apply; the job at IN_JOB_K, its exchange left out, over that process at
  IN_JOB_K is the job's slowdown, applied to both.
  """
  samples = result["samples"][model]
  fit = result["calibration"]
  unshaped = _link(result, "unshaped")
  out = []
  for index, single in enumerate(samples["single"]):
    alone = _per_micro_batch(result, single)
    lone_k = _per_micro_batch(result, samples["single_k"][index])
    lone = (None if None in (alone, lone_k) else
            scaling_model.split_apply(alone, lone_k, network_rows.IN_JOB_K))
    parts = {"alone": alone, "lone": lone}
    for exchange, jobs in samples["in_job"].items():
      recipe = network_rows.recipe(network_rows.IN_JOB_VARIANTS[exchange], fit)
      exchange_s = scaling_model.exchange_seconds(
          result["gradient_bytes"][model], result["hosts"], unshaped, recipe)
      job = _per_micro_batch(result, jobs[index], exchange_s)
      parts[exchange] = (None if lone is None or job is None else
                         tuple(t * job / lone_k for t in lone))
    out.append(parts)
  return out


def median_parts(result, model, key):
  """The rounds' median (compute per micro-batch, apply per update) of
  compute_rounds' `key` ("lone" or an exchange); None if none measured."""
  parts = [r[key] for r in compute_rounds(result, model) if r[key]]
  if not parts:
    return None
  return median([p[0] for p in parts]), median([p[1] for p in parts])


def in_job_compute_s(result, model, exchange):
  """A rank's update of one micro-batch in a 2-host job with `exchange`,
  the rounds' median (None if none measured)."""
  return median([r[exchange] and sum(r[exchange])
                 for r in compute_rounds(result, model)])


def rows(result):
  """One dict per (model, rate, variant): measured and predicted efficiency.

  A round's model uses that round's own compute, alone and in the job, as
  its measured ratio uses that round's baseline: this machine's speed
  moves between rounds, and both sides of a ratio should move with it.
  """
  out = []
  hosts = result["hosts"]
  for model, data in result["samples"].items():
    single = [m and m["examples_per_sec"] for m in data["single"]]
    computes = compute_rounds(result, model)
    for rate, variants in data["rows"].items():
      for variant, samples in variants.items():
        recipe = _recipe(result, variant)
        rates = [m and m["examples_per_sec"] for m in samples]
        efficiencies = [a / b / hosts for a, b in zip(rates, single)
                        if a is not None and b is not None]

        def model_efficiency(parts, alone, rate=rate, recipe=recipe):
          if parts is None or alone is None:
            return None
          return scaling_model.efficiency(
              parts[0], result["gradient_bytes"][model], hosts,
              _link(result, rate), recipe, alone_s=alone, apply_s=parts[1])

        windows = [m["seconds"] for m in samples + data["single"] if m]
        out.append({"model": model, "rate": rate, "variant": variant,
                    "examples_per_sec": median(rates),
                    "efficiency": median(efficiencies),
                    "per_round": efficiencies,
                    "predicted": median([
                        model_efficiency(c[recipe.exchange], c["alone"])
                        for c in computes]),
                    "predicted_alone": median([
                        model_efficiency(c["lone"], c["alone"])
                        for c in computes]),
                    "shortest_window_s": min(windows, default=None)})
  return out


def _rows_lines(result):
  if result is None:
    return ["Not measured yet: `make bench-network` (about "
            f"{network_notes.FULL_RUN_MINUTES} minutes, root, a quiet "
            "machine)."]
  m = result["machine"]
  lines = [f"Run {m['date']} on {m['summary']}; {result['rounds']} rounds, "
           f"windows of at least {result['window_s']:g} s (column shortest "
           f"window), load average {m['load_average_at_start']} at the start,"
           f" {m.get('load_average_at_end')} at the end.", ""]
  for model in result["samples"]:
    compute = compute_s(result, model)
    in_job = {e: in_job_compute_s(result, model, e)
              for e in result["samples"][model]["in_job"]}
    apply = median([r["lone"] and r["lone"][1]
                    for r in compute_rounds(result, model)])
    baselines = [m and m["runs"] for m in result["samples"][model]["single"]]
    lines += [f"**{model}**: {result['gradient_bytes'][model] / 1e6:.1f} MB "
              f"of gradients, {result['micro_batch']} examples per replica "
              "per micro-batch, 1 process "
              + (f"{result['micro_batch'] / compute:,.0f} ex/s "
                 f"({compute * 1e3:.0f} ms per micro-batch; before, between"
                 " and after the variants, per round: "
                 + "; ".join("failed" if b is None else
                             ", ".join(render.fmt(r) for r in b)
                             for b in baselines) + ")"
                 if compute else "failed")
              + (f", of which the apply {apply * 1e3:.1f} ms (from 1 "
                 f"process at k={network_rows.IN_JOB_K})"
                 if apply is not None and compute else "")
              + "".join(f"; a rank of a 2-host {exchange} job "
                        f"{t * 1e3:.0f} ms ({t / compute - 1:+.0%})"
                        for exchange, t in in_job.items() if t and compute)
              + ".", "",
              "| link | variant | ex/s, 2 hosts | efficiency (ideal 1) | "
              "per round | model | model / measured | model, lone compute "
              "| shortest window |",
              "|---|---|---|---|---|---|---|---|---|"]
    for row in (r for r in rows(result) if r["model"] == model):
      ratio = (row["predicted"] / row["efficiency"]
               if row["predicted"] and row["efficiency"] else None)
      window = row["shortest_window_s"]
      lines.append(
          f"| {row['rate']} | {row['variant']} | "
          f"{render.fmt(row['examples_per_sec'])} | "
          f"{render.fmt(row['efficiency'])} | "
          f"{', '.join(render.fmt(e) for e in row['per_round']) or '-'} | "
          f"{render.fmt(row['predicted'])} | {render.fmt(ratio)} | "
          f"{render.fmt(row['predicted_alone'])} | "
          f"{'-' if window is None else f'{window:.1f} s'} |")
    lines.append("")
  return lines


def _allreduce_lines(result):
  if result is None:
    return ["Not measured yet: `python -m tools.bench.network allreduce`."]
  fit = network_allreduce.calibration(result)
  compared = network_allreduce.comparison(result)
  tested = [p / m for *_, m, p, t in compared if t]
  lines = [
      f"Run {result['machine']['date']} on {result['machine']['summary']}. "
      f"Calibration (the unshaped rows): {fit['latency_s'] * 1e6:.0f} µs per "
      f"ring step and {fit['overhead_s'] * 1e3:.1f} ms of Horovod overhead "
      "per exchange beyond half its cycle (a line through the 4-byte "
      "allreduce's times on 2-4 hosts), "
      f"{fit['unshaped_bandwidth'] / 1e6:,.0f} MB/s on the unshaped veth "
      "(the largest buffer on 2 hosts), fp16 compression's casts "
      f"{fit['fp16_cast_s_per_byte'] * 1e9:.2f} ns per gradient byte (timed "
      "alone on that buffer by the ranks) and its float16 sum "
      f"{fit['fp16_sum_s_per_byte'] * 1e9:.2f} ns per gradient byte summed "
      "(what makes the model give that buffer's compressed allreduce its "
      "measured time)"
      + (", multi_worker_mirrored's all-reduce "
         f"{fit['collective_overhead_s'] * 1e3:.1f} ms per exchange (its "
         "4-byte all-reduce's mean on 2-4 hosts) and "
         f"{fit['collective_cpu_s_per_byte'] * 1e9:.2f} ns per byte beyond "
         "the wire (its all-reduce of that buffer, less Horovod's wire time)"
         if "collective_cpu_s_per_byte" in fit else "")
      + ". Shaped links: the rate's TCP "
      f"goodput ({scaling_model.TCP_PAYLOAD_FRACTION:.3f} of it) and the "
      f"token bucket's burst ({links.BURST_S * 1e3:g} ms of traffic, 64 KiB "
      f"at least) after the {result['runs'][0]['gap_s'] * 1e3:.0f} ms gap "
      "that precedes each allreduce. Every shaped row is a prediction: "
      + (f"model / measured from {min(tested):.2f} to {max(tested):.2f} over "
         f"{len(tested)} rows." if tested else "none."), "",
      "| link | hosts | buffer | measured | model | model / measured | |",
      "|---|---|---|---|---|---|---|"]
  for rate, hosts, label, _, measured, predicted, is_test in compared:
    lines.append(f"| {rate} | {hosts} | {label} | {measured * 1e3:.1f} ms | "
                 f"{predicted * 1e3:.1f} ms | {predicted / measured:.2f} | "
                 f"{'' if is_test else 'calibration'} |")
  return lines


def _on_gpu(recipe):
  """`recipe` with its CPU costs per byte as a GPU host's: a GPU casts and
  sums as much faster as it computes."""
  return dataclasses.replace(
      recipe,
      cpu_s_per_byte=recipe.cpu_s_per_byte / network_notes.GPU_SPEEDUP,
      reduce_s_per_byte=recipe.reduce_s_per_byte / network_notes.GPU_SPEEDUP)


def _prediction_lines(result):
  if result is None:
    return ["Needs the rows' measured compute: `make bench-network`."]
  lines = []
  for model in result["samples"]:
    lone = median_parts(result, model, "lone")
    if lone is None:
      continue
    gpu, gpu_apply = (t / network_notes.GPU_SPEEDUP for t in lone)
    recipes = {v: _on_gpu(_recipe(result, v)) for v in result["recipes"]}
    lines += [f"**{model}** ({gpu * 1e3:.2f} ms per micro-batch and "
              f"{gpu_apply * 1e3:.2f} ms of apply per update on a GPU: this "
              f"host's {lone[0] * 1e3:.0f} and {lone[1] * 1e3:.1f} ms / "
              f"{network_notes.GPU_SPEEDUP}; "
              f"{result['gradient_bytes'][model] / 1e6:.1f} MB):", ""]
    lines += scaling_model.prediction_table(
        gpu, result["gradient_bytes"][model], PREDICT_HOSTS, PREDICT_GBITS,
        recipes, apply_s=gpu_apply) + [""]
  return lines


def plot(result, path):
  """Efficiency against link goodput, a panel per model, a colour per variant.

  Points are the measured medians (bars: the rounds' range), lines the model
  over a continuum of rates.
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  from matplotlib import pyplot  # pylint: disable=g-import-not-at-top
  models = list(result["samples"])
  figure, axes = pyplot.subplots(1, len(models), figsize=(6 * len(models), 4.5),
                                 squeeze=False)
  measured = rows(result)
  for ax, model in zip(axes[0], models):
    compute = compute_s(result, model)
    speeds = [10 ** (e / 10) for e in range(65, 96)]  # 3 MB/s to 3 GB/s
    for variant, color in zip(result["recipes"], COLORS):
      recipe = _recipe(result, variant)
      in_job = median_parts(result, model, recipe.exchange)
      if compute is not None and in_job is not None:
        ax.plot([s * 8 / 1e9 for s in speeds],
                [scaling_model.efficiency(
                    in_job[0], result["gradient_bytes"][model],
                    result["hosts"],
                    scaling_model.Link(
                        s, result["calibration"]["latency_s"],
                        cpu_bandwidth=result["calibration"][
                            "unshaped_bandwidth"]),
                    recipe, alone_s=compute, apply_s=in_job[1])
                 for s in speeds],
                "--", color=color, linewidth=1)
      points = [r for r in measured if r["model"] == model and
                r["variant"] == variant and r["efficiency"] is not None]
      xs = [_link(result, r["rate"]).bandwidth * 8 / 1e9 for r in points]
      ys = [r["efficiency"] for r in points]
      errors = [[y - min(r["per_round"]) for y, r in zip(ys, points)],
                [max(r["per_round"]) - y for y, r in zip(ys, points)]]
      ax.errorbar(xs, ys, yerr=errors, fmt="o-", color=color, label=variant,
                  capsize=3)
    ax.set_xscale("log")
    ax.set_ylim(0, max([1.05] + [max(r["per_round"]) + 0.05 for r in measured
                                 if r["model"] == model and r["per_round"]]))
    ax.set_xlabel("link goodput per host, Gbit/s (unshaped: veth as measured)")
    ax.set_ylabel("weak-scaling efficiency, 2 hosts (1 = ideal)")
    ax.set_title(f"{model}: {result['gradient_bytes'][model] / 1e6:.1f} MB "
                 f"of gradients, {compute * 1e3:.0f} ms compute"
                 if compute else model)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
  figure.suptitle("points: measured (bars: range over rounds); dashed: "
                  "tools/scaling_model.py with a rank's compute in the job",
                  fontsize=9)
  figure.tight_layout()
  figure.savefig(path, dpi=110)
  pyplot.close(figure)


def page(rows_result, allreduce_result, plot_name):
  """docs/NETWORK.md's text."""
  lines = ["# Scaling over a network", "", network_notes.INTRO, "",
           "## Training rows: 2 hosts x 1 rank / 1 process", ""]
  if rows_result is not None:
    lines += [f"![efficiency against link bandwidth]({plot_name})", ""]
  lines += _rows_lines(rows_result)
  if rows_result is not None:
    lines += ["", "### What the rows say", ""] + [
        f"- {note}" for note in network_notes.READING]
  lines += ["", "## What a shaped link stands for", "",
            network_notes.WHAT_A_LINK_STANDS_FOR, "",
            "## The rule", "", network_notes.RULE, "",
            "## Allreduce only: the model's network half, 2-4 hosts", ""]
  lines += _allreduce_lines(allreduce_result)
  lines += ["", "## Predicted: 8 to 128 hosts", "",
            network_notes.PREDICTIONS, ""]
  lines += _prediction_lines(rows_result)
  lines += ["", "## Reproduce", "", "```", network_notes.REPRODUCE, "```", "",
            "## Method", ""] + [f"- {note}" for note in network_notes.METHOD]
  return "\n".join(lines) + "\n"


def write_page(paths):
  """Renders paths["page"] (and paths["plot"] when rows exist); returns it."""
  rows_result = _load(paths["rows"])
  allreduce_result = _load(paths["allreduce"])
  if rows_result is not None and allreduce_result is not None:
    recalibrate(rows_result, allreduce_result)
  if rows_result is not None:
    plot(rows_result, paths["plot"])
  text = page(rows_result, allreduce_result, os.path.basename(paths["plot"]))
  render.write(paths["page"], text)
  return text


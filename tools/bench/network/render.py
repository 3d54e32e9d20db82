"""docs/NETWORK.md from the network bench's JSON (plot.py draws its plot).

Reads results/rows.json (training rows) and results/allreduce.json
(allreduce-only runs) and nothing else, so `python -m tools.bench.network
render` redraws the page from saved results; either file may be missing, and
its sections then say how to make it. Predictions come from
scaling_model.py with the compute the rows measured. The prose is
NETWORK.md.template's, link.md's (shared with docs/BENCH.md) and
reading.md's (what the rows say, shown where rows exist).
"""
import dataclasses
import os

from tools import repo
from tools.bench.network import analysis
from tools.bench.network import figures
from tools.bench.network import links
from tools.bench.network import reading
from tools.bench.network import rows as network_rows
from tools.bench.network import scaling_model
from tools.bench.perf import render as perf_render
from tools.bench.perf.results import median

_HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(_HERE, "NETWORK.md.template")
READING = os.path.join(_HERE, "reading.md")

# About how long `make bench-network` takes on the 2-core host.
FULL_RUN_MINUTES = 80


def recalibrate(rows_result, allreduce_result):
  """Gives the rows the allreduce runs' calibration, the one source of the
  model's network inputs (the rows keep the one they were sized with only
  until the page is drawn)."""
  fit = analysis.calibration(allreduce_result)
  rows_result["calibration"] = fit
  rows_result["recipes"] = {
      v: dataclasses.asdict(network_rows.recipe(v, fit))
      for v in rows_result["recipes"]}


def variant_recipe(result, variant):
  """The model's Recipe of `variant` in the rows' `result`."""
  return scaling_model.Recipe(**result["recipes"][variant])


def compute_s(result, model):
  """Seconds of one micro-batch update on one process: the baselines' median."""
  rate = median([m and m["examples_per_sec"]
                 for m in result["samples"][model]["single"]])
  return None if rate is None else result["micro_batch"] / rate


def link(result, rate):
  """The model's Link of `rate` on the rows' hosts, calibrated."""
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
  unshaped = link(result, "unshaped")
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
        recipe = variant_recipe(result, variant)
        rates = [m and m["examples_per_sec"] for m in samples]
        efficiencies = [a / b / hosts for a, b in zip(rates, single)
                        if a is not None and b is not None]

        def model_efficiency(parts, alone, rate=rate, recipe=recipe):
          if parts is None or alone is None:
            return None
          return scaling_model.efficiency(
              parts[0], result["gradient_bytes"][model], hosts,
              link(result, rate), recipe, alone_s=alone, apply_s=parts[1])

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
            f"{FULL_RUN_MINUTES} minutes, root, a quiet "
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
                             ", ".join(repo.fmt(r) for r in b)
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
          f"{repo.fmt(row['examples_per_sec'])} | "
          f"{repo.fmt(row['efficiency'])} | "
          f"{', '.join(repo.fmt(e) for e in row['per_round']) or '-'} | "
          f"{repo.fmt(row['predicted'])} | {repo.fmt(ratio)} | "
          f"{repo.fmt(row['predicted_alone'])} | "
          f"{'-' if window is None else f'{window:.1f} s'} |")
    lines.append("")
  return lines


def _allreduce_lines(result):
  if result is None:
    return ["Not measured yet: `python -m tools.bench.network allreduce`."]
  fit = analysis.calibration(result)
  compared = analysis.comparison(result)
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
      cpu_s_per_byte=recipe.cpu_s_per_byte / scaling_model.GPU_SPEEDUP,
      reduce_s_per_byte=recipe.reduce_s_per_byte / scaling_model.GPU_SPEEDUP)


def _prediction_lines(result):
  if result is None:
    return ["Needs the rows' measured compute: `make bench-network`."]
  lines = []
  for model in result["samples"]:
    lone = median_parts(result, model, "lone")
    if lone is None:
      continue
    gpu, gpu_apply = (t / scaling_model.GPU_SPEEDUP for t in lone)
    recipes = {v: _on_gpu(variant_recipe(result, v)) for v in result["recipes"]}
    lines += [f"**{model}** ({gpu * 1e3:.2f} ms per micro-batch and "
              f"{gpu_apply * 1e3:.2f} ms of apply per update on a GPU: this "
              f"host's {lone[0] * 1e3:.0f} and {lone[1] * 1e3:.1f} ms / "
              f"{scaling_model.GPU_SPEEDUP}; "
              f"{result['gradient_bytes'][model] / 1e6:.1f} MB):", ""]
    lines += scaling_model.prediction_table(
        gpu, result["gradient_bytes"][model], figures.PREDICT_HOSTS,
        figures.PREDICT_GBITS,
        recipes, apply_s=gpu_apply) + [""]
  return lines


def _reading(result, allreduce_result):
  """reading.md's list, without its comment, its figures filled from the
  rows' `result` and the allreduce runs (None: not measured)."""
  compute = {
      model: dict({e: in_job_compute_s(result, model, e)
                   for e in result["samples"][model]["in_job"]},
                  alone=compute_s(result, model),
                  lone=median_parts(result, model, "lone"))
      for model in result["samples"]}
  with open(READING, encoding="utf-8") as f:
    text = f.read().split("-->", 1)[1].strip()
  text = repo.fill_text(text, reading.fields(result, rows(result), compute,
                                             allreduce_result))
  return [l for l in text.split("\n") if l]


def _example_fields(result):
  """figures.example_fields for the rows' `result` (None: not measured)."""
  model = figures.EXAMPLE_MODEL
  lone = result and median_parts(result, model, "lone")
  if lone is None:
    return figures.example_fields(None, None, None, None, None)
  return figures.example_fields(
      *(t / scaling_model.GPU_SPEEDUP for t in lone),
      result["gradient_bytes"][model], _on_gpu(variant_recipe(result, "horovod")),
      result["micro_batch"])


def page(rows_result, allreduce_result, plot_name):
  """docs/NETWORK.md's text."""
  rows = []
  if rows_result is not None:
    rows += [f"![efficiency against link bandwidth]({plot_name})", ""]
  rows += _rows_lines(rows_result)
  if rows_result is not None:
    rows += (["", "### What the rows say", ""] +
             _reading(rows_result, allreduce_result))
  fit = allreduce_result and analysis.calibration(allreduce_result)
  return repo.fill_template(TEMPLATE, dict(
      figures.prediction_fields(fit), **_example_fields(rows_result),
      **figures.rule_fields(fit, allreduce_result and
                            allreduce_result["buffers"]),
      rows="\n".join(rows),
      what_a_link_stands_for=perf_render.link_text(
          repo.load_json(perf_render.BENCH_JSON), allreduce_result),
      allreduce="\n".join(_allreduce_lines(allreduce_result)),
      predictions="\n".join(_prediction_lines(rows_result))))

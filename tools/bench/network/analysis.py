"""What the allreduce-only runs measure: the model's network calibration.

allreduce.py runs the measurements; this module reads them, with nothing
but the model and the links' description, so that both pages' renderers
(docs/NETWORK.md and docs/BENCH.md, which quotes the calibration)
can use it without the bench's runners. The unshaped runs calibrate; every
shaped row of `comparison` is a prediction.
"""
import dataclasses
import statistics

from tools.bench.network import links
from tools.bench.network import scaling_model


def _unshaped(result, exchange):
  """{hosts: run} of `exchange`'s runs on the unshaped link."""
  return {r["hosts"]: r for r in result["runs"]
          if r["exchange"] == exchange and r["rate"] == "unshaped"}


def calibration(result):
  """What the unshaped runs measure: {latency_s, overhead_s,
  unshaped_bandwidth, fp16_cast_s_per_byte, fp16_sum_s_per_byte, and
  collective_overhead_s and collective_cpu_s_per_byte where the collective
  ran}."""
  unshaped = _unshaped(result, "horovod")
  recipe = scaling_model.Recipe(cycle_s=unshaped[min(unshaped)]["cycle_s"])
  probe = str(result["probe_bytes"])
  latency, overhead = scaling_model.fit_small_allreduces(
      {n: r["seconds"][probe] for n, r in unshaped.items()}, recipe)
  recipe = dataclasses.replace(recipe, overhead_s=overhead)
  largest = max(result["buffers"].values())
  # 2 hosts: the ring moves the whole buffer once each way.
  fixed = scaling_model.exchange_seconds(0, 2, scaling_model.Link(1.0, latency),
                                         recipe)
  data_s = unshaped[2]["seconds"][str(largest)] - fixed
  bandwidth = largest / max(data_s, 1e-9)
  link = links.link("unshaped", latency, bandwidth,
                    links.cpu_share(2, result["machine"]["cores"]))

  def beyond(seconds, wire_bytes):
    """Seconds per gradient byte that `seconds` spent beyond the wire."""
    return max(0.0, seconds - scaling_model.ring_seconds(wire_bytes, 2, link)
               ) / largest

  casts = unshaped[2]["cast_seconds"][str(largest)] / largest

  measured = unshaped[2]["fp16_seconds"][str(largest)]

  def faster_than_measured(sum_per_byte):
    return scaling_model.exchange_seconds(largest, 2, link, fp16_recipe(
        recipe, {"fp16_cast_s_per_byte": casts,
                 "fp16_sum_s_per_byte": sum_per_byte})) < measured

  fit = {"latency_s": latency, "overhead_s": overhead,
         "unshaped_bandwidth": bandwidth, "fp16_cast_s_per_byte": casts,
         # The sum per byte at which the model gives the compressed
         # exchange on 2 unshaped hosts its measured time (none where the
         # rest already takes it).
         "fp16_sum_s_per_byte": (
             scaling_model.bisect(faster_than_measured, 0.0, 1e-6)
             if faster_than_measured(0.0) else 0.0)}
  collective = _unshaped(result, "collective")
  if 2 in collective:
    # Its fixed cost: the probe's mean time beyond a ring of nothing.
    fit["collective_overhead_s"] = max(0.0, statistics.mean(
        r["seconds"][probe] - scaling_model.ring_seconds(0, n, link)
        for n, r in collective.items()))
    fit["collective_cpu_s_per_byte"] = beyond(
        collective[2]["seconds"][str(largest)] - fit["collective_overhead_s"],
        largest)
  return fit


def fp16_recipe(recipe, fit):
  """`recipe` with fp16 compression as the calibration `fit` measured it:
  half the bytes, casts outside the ring, the float16 sum inside it."""
  return dataclasses.replace(
      recipe, compression=0.5, cpu_s_per_byte=fit["fp16_cast_s_per_byte"],
      reduce_s_per_byte=fit["fp16_sum_s_per_byte"])


def comparison(result):
  """Rows of (rate, hosts, buffer label, bytes, measured s, predicted s,
  whether the row is a prediction rather than calibration); labels end in
  " fp16" for Horovod's compressed allreduce, " collective" for
  multi_worker_mirrored's."""
  fit = calibration(result)
  labels = {result["probe_bytes"]: f"{result['probe_bytes']} B probe"}
  labels.update({b: label for label, b in result["buffers"].items()})
  rows = []
  for run in result["runs"]:
    link = links.link(run["rate"], fit["latency_s"], fit["unshaped_bandwidth"],
                      links.cpu_share(run["hosts"],
                                      result["machine"]["cores"]))
    if run["exchange"] == "collective":
      kinds = ((scaling_model.Recipe(
          exchange="collective", overhead_s=fit["collective_overhead_s"],
          cpu_s_per_byte=fit["collective_cpu_s_per_byte"]),
                "seconds", " collective"),)
    else:
      plain = scaling_model.Recipe(cycle_s=run["cycle_s"],
                                   overhead_s=fit["overhead_s"])
      fp16 = fp16_recipe(plain, fit)
      kinds = ((plain, "seconds", ""), (fp16, "fp16_seconds", " fp16"))
    for recipe, key, suffix in kinds:
      for nbytes, measured in sorted(
          (int(k), v) for k, v in run[key].items()):
        predicted = scaling_model.exchange_seconds(nbytes, run["hosts"], link,
                                                   recipe)
        rows.append((run["rate"], run["hosts"], labels[nbytes] + suffix,
                     nbytes, measured, predicted, run["rate"] != "unshaped"))
  return rows

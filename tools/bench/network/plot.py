"""docs/network_scaling.png: the training rows against the model.

Drawn from results/rows.json through render.py's figures, so the plot
and the page's tables show the same rows.
"""
from tools.bench.network import render
from tools.bench.network import scaling_model

COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")


def plot(result, path):
  """Efficiency against link goodput, a panel per model, a colour per variant.

  Points are the measured medians (bars: the rounds' range), lines the model
  over a continuum of rates.
  """
  # Not at the top: matplotlib is the optional `plots` extra, needed only
  # to draw, not by the tests and tools that import this module's figures.
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  from matplotlib import pyplot  # pylint: disable=g-import-not-at-top
  models = list(result["samples"])
  figure, axes = pyplot.subplots(1, len(models), figsize=(6 * len(models), 4.5),
                                 squeeze=False)
  measured = render.rows(result)
  for ax, model in zip(axes[0], models):
    compute = render.compute_s(result, model)
    speeds = [10 ** (e / 10) for e in range(65, 96)]  # 3 MB/s to 3 GB/s
    for variant, color in zip(result["recipes"], COLORS):
      recipe = render.variant_recipe(result, variant)
      in_job = render.median_parts(result, model, recipe.exchange)
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
      xs = [render.link(result, r["rate"]).bandwidth * 8 / 1e9 for r in points]
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
                  "tools/bench/network/scaling_model.py with a rank's "
                  "compute in the job",
                  fontsize=9)
  figure.tight_layout()
  figure.savefig(path, dpi=110)
  pyplot.close(figure)

"""The large-batch study's results: its table, projection and page.

build_study turns the runs (runs.jsonl) into study.json: per optimizer and
cell the AUC after the run, what it read, and the examples it needed to
reach the S = 1 AUC less the margin (from its checkpoints); per method the
time to that AUC on 8 to 256 hosts, projected by the network bench's model
(tools/bench/network/scaling_model.py) from the S = 1 run's measured compute
per micro-batch, the dense bytes it allreduces once an update and the table
rows it trades by all-to-all every micro-batch. Nothing here imports
TensorFlow, so the page can be rebuilt from runs.jsonl alone.
"""
import json
import os

from tools import repo
from tools.bench.network import scaling_model
from tools.study import batch_plots
from tools.study import batch_specs
from tools.study import click_results

PROJECTED_HOSTS = (8, 16, 32, 64, 128, 256)
LINK_GBITS = 10
ROW_BYTES = 8 * 4
"""One dynamic table row of the study's model (dimension 8, float32)."""
LOOKUPS = 26
"""Table rows one example looks up in the deep part, and weights in the
wide part: one id per categorical column."""
ID_BYTES = 8
WIDE_BYTES = 4 + ID_BYTES
"""One wide weight's gradient as a sparse exchange sends it: value and id."""


def dense_bytes(run):
  """The bytes an update allreduces: the trainable variables less the
  dynamic tables (all-to-all) and the wide part's hashed weights (sparse)."""
  tables = LOOKUPS * batch_specs.TABLE_ROWS * (ROW_BYTES + 4)
  return run["trainable_bytes"] - tables


def _by_cell(runs):
  cells = {}
  for run in runs:
    key = (run["optimizer"], run["method"], run["scales"][0])
    cells.setdefault(key, []).append(run)
  return cells


def examples_to(run, target):
  """Examples read when the run's AUC first reached `target`, or None."""
  updates, _ = click_results.time_to(run["curve"], target)
  return None if updates is None else updates * batch_specs.examples(run)


def cap_bound(run):
  """Whether AdaScale stopped at the examples cap before tau reached T."""
  return (run["method"] in batch_specs.ADASCALE and run["tau"] is not None
          and run["tau"] < batch_specs.T - 0.5)


def _row(runs, baseline):
  first = runs[0]
  aucs = [r["auc"] for r in runs]
  auc = sum(aucs) / len(aucs)
  examples = first["micro_batches"] * batch_specs.MICRO_BATCH
  target = baseline["auc"] - batch_specs.AUC_MARGIN
  reached = [examples_to(r, target) for r in runs]
  base_reached = examples_to(baseline, target)
  return dict(
      method=first["method"], scale=first["scales"][0],
      global_batch=batch_specs.examples(first), seeds=len(runs), auc=auc,
      auc_range=(min(aucs), max(aucs)),
      auc_delta=auc - baseline["auc"],
      within=abs(auc - baseline["auc"]) <= batch_specs.AUC_MARGIN,
      updates=first["updates"], tau=first["tau"],
      mean_gain=(None if first["tau"] is None else
                 first["tau"] / first["updates"]),
      examples=examples,
      examples_ratio=examples / (baseline["micro_batches"] *
                                 batch_specs.MICRO_BATCH),
      examples_to_target=reached[0],
      to_target_ratio=(reached[0] / base_reached
                       if reached[0] and base_reached else None),
      cap_bound=cap_bound(first),
      wall_seconds=sum(r["wall_seconds"] for r in runs),
      curve=[(u * batch_specs.examples(first), a)
             for u, _, a in first["curve"]])


def alltoall_seconds(examples, hosts, link):
  """One micro-batch's table traffic on `hosts` hosts: each example's ids
  out, their rows back and the rows' gradients out again, (N-1)/N of them
  to other hosts, with no deduplication (an upper bound)."""
  if hosts == 1:
    return 0.0
  sent = (examples * LOOKUPS * (ID_BYTES + 2 * ROW_BYTES) *
          (hosts - 1) / hosts)
  return sent / link.bandwidth + 3 * (hosts - 1) * link.latency


def allgather_seconds(examples, hosts, link):
  """An update's sparse exchange of the wide part: every host receives the
  other hosts' weight gradients (`examples` a host, no deduplication)."""
  if hosts == 1:
    return 0.0
  received = (hosts - 1) * examples * LOOKUPS * WIDE_BYTES
  return received / link.bandwidth + (hosts - 1) * link.latency


def projected_seconds(updates, scale, compute_s, nbytes, hosts):
  """Time to `updates` updates of S x 512 examples on `hosts` hosts at 10
  Gbit/s: S/hosts micro-batches a host (a smaller one where hosts > S),
  each with its all-to-all, then the allreduce of `nbytes` of dense
  gradients and the wide part's allgather."""
  link = scaling_model.Link(
      bandwidth=scaling_model.goodput(LINK_GBITS * 1e9),
      latency=scaling_model.DEFAULT_CLUSTER_LATENCY_S)
  steps = max(1, scale // hosts)
  examples = scale * batch_specs.MICRO_BATCH / hosts / steps
  micro_s = (compute_s * examples / batch_specs.MICRO_BATCH +
             alltoall_seconds(examples, hosts, link))
  recipe = scaling_model.Recipe(accumulation_steps=steps)
  return updates * (
      scaling_model.update_seconds(micro_s, nbytes, hosts, link, recipe) +
      allgather_seconds(examples * steps, hosts, link))


def _projection(cells, optimizer, baseline, compute_s):
  """Hours to the target on each number of hosts, for the S = 1 run and
  every cell whose run reached the target, at `compute_s` a micro-batch."""
  target = baseline["auc"] - batch_specs.AUC_MARGIN
  out = []
  mine = [(key[1:], runs) for key, runs in cells.items()
          if key[0] == optimizer]
  for (method, scale), runs in sorted(mine, key=lambda item: item[0][::-1]):
    updates, _ = click_results.time_to(runs[0]["curve"], target)
    if updates is not None:
      out.append(dict(method=method, scale=scale, hours=[
          projected_seconds(updates, scale, compute_s, dense_bytes(runs[0]),
                            h) / 3600 for h in PROJECTED_HOSTS]))
  return out


def build_study(runs, wall_seconds=None, processes=None):
  """study.json's object: per optimizer the baseline, the rows and the
  projection; cells of the grid no run holds are listed as missing."""
  cells = _by_cell(runs)
  study = dict(train_rows=batch_specs.TRAIN_ROWS,
               eval_rows=batch_specs.EVAL_ROWS, T=batch_specs.T,
               micro_batch=batch_specs.MICRO_BATCH, cap=batch_specs.CAP,
               margin=batch_specs.AUC_MARGIN, hosts=PROJECTED_HOSTS,
               link_gbits=LINK_GBITS, wall_seconds=wall_seconds,
               processes=processes, optimizers={})
  for optimizer in batch_specs.OPTIMIZERS:
    baseline_runs = cells.get((optimizer, "baseline", 1))
    if not baseline_runs:
      continue
    # Cells are held to the mean over the baseline's seeds; the checkpoint
    # curve and the timing are the first seed's.
    baseline = dict(baseline_runs[0], auc=sum(
        r["auc"] for r in baseline_runs) / len(baseline_runs))
    rows = [_row(cells[key], baseline) for key in sorted(
        (k for k in cells if k[0] == optimizer and k[1] != "baseline"),
        key=lambda k: (k[2], batch_specs.METHODS.index(k[1])))]
    missing = [f"{s['method']} S={s['scales'][0]}"
               for s in batch_specs.grid((optimizer,))
               if (optimizer, s["method"], s["scales"][0]) not in cells]
    compute_s = click_results.compute_per_micro_batch(baseline)
    study["optimizers"][optimizer] = dict(
        baseline=_row(baseline_runs, baseline), rows=rows,
        projection=_projection(cells, optimizer, baseline, compute_s),
        compute_ms=1e3 * compute_s,
        dense_bytes=dense_bytes(baseline), missing=missing)
  return study


RULE_OF = {"LSW": "linear", "sqrt": "sqrt", "CowClip": "cowclip",
           "AS": "adascale"}
"""The `lr_scaling` rule each method of the two click studies runs (the
identity rule adapts nothing, and warns of nothing)."""


def held_up_to(click_study, batch_study):
  """{rule: the largest S up to which every Adagrad run of it, in the click
  study (census, MovieLens) and this one, kept its S = 1 AUC less the
  study's margin}: what `train_ops.scaling.HELD_UP_TO` must say."""
  held = {}
  for task in click_study["tasks"]:
    floor = (task["baselines"]["adagrad"]["auc_mean"] -
             task["target"]["auc_tolerance"])
    for row in task["rows"]:
      if row["optimizer"] == "adagrad" and row["method"] in RULE_OF:
        held.setdefault(RULE_OF[row["method"]], {}).setdefault(
            row["S"], []).append(row["auc_mean"] >= floor)
  entry = batch_study["optimizers"]["adagrad"]
  floor = entry["baseline"]["auc"] - batch_study["margin"]
  for row in entry["rows"]:
    if row["method"] in RULE_OF:
      held.setdefault(RULE_OF[row["method"]], {}).setdefault(
          row["scale"], []).append(row["auc"] >= floor)
  largest = {}
  for rule in RULE_OF.values():
    largest[rule] = 1
    for scale in sorted(held.get(rule, {})):
      if not all(held[rule][scale]):
        break
      largest[rule] = scale
  return largest


def write_outputs(results_dir, out_dir, study):
  """study.json into results_dir, then the page and its figure into
  out_dir; returns their paths."""
  path = os.path.join(results_dir, "study.json")
  repo.write(path, json.dumps(study, indent=1) + "\n")
  return [path] + batch_plots.render(study, out_dir)

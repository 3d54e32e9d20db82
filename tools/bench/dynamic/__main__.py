"""Dynamic tables against hashed ones: AUC, rows in use, examples/s, memory.

  python -m tools.bench.dynamic            # make bench-dynamic
  python -m tools.bench.dynamic --smoke    # a few minutes: is it working?
  python -m tools.bench.dynamic --parts=cut  # one part; the rest kept
  python -m tools.bench.dynamic render     # the page from the saved JSON

Every measurement is a fresh process (worker.py) on click logs drawn once
(data.py): quality (one epoch each of the hashed table, the dynamic one and
the dynamic one with min_count=2, then TFRA's, in that order, every round, the
round's number seeding the dense layers: the rounds' spread is the seed's),
speed (hashed, dynamic and TFRA alternating, every round, then hashed and
dynamic again on ids folded to `REPEATING` per column), memory (a
dynamic table at two capacities fed 10x its capacity of new ids), the row
cut (one epoch each of the dynamic table with min_count 1 and 2 at a
capacity above the ids seen twice, `--cut_rows`, where min_count=2 can
leave rows empty). `--parts` runs some of them and keeps the others'
figures from the results file. TFRA's
rows are measured only where tensorflow_recommenders_addons is installed
(setup.py's `bench` extra). Writes results/dynamic.json and renders
docs/DYNAMIC.md.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

from tools import repo
from tools.bench.dynamic import render
from tools.bench.perf import runner

DEFAULTS = {"train": 2500000, "eval": 100000, "quality_rounds": 3,
            "speed_rounds": 5, "speed_steps": 3000,
            "memory_capacities": "65536,262144", "cut_rows": 524288}
SMOKE = {"train": 20000, "eval": 5000, "quality_rounds": 1,
         "speed_rounds": 1, "speed_steps": 20,
         "memory_capacities": "8192,32768", "cut_rows": 16384}
QUALITY = {"hashed": ("hashed", 1), "dynamic": ("dynamic", 1),
           "dynamic_min_count_2": ("dynamic", 2), "tfra": ("tfra", 1)}
SPEED = ("hashed", "dynamic", "tfra", "hashed_repeating", "dynamic_repeating")
REPEATING = 20000
"""Distinct ids per column of the speed runs named `_repeating`: every id
has a row after the first updates, so a step admits and evicts nothing and
the table's own cost is its lookups and bookkeeping alone."""
CUT = {"dynamic": 1, "dynamic_min_count_2": 2}
PARTS = ("quality", "speed", "memory", "cut")
WORKER_LIMIT_S = 1800


def parse_args(argv):
  argv = sys.argv[1:] if argv is None else argv
  sizes = SMOKE if "--smoke" in argv else DEFAULTS
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("action", nargs="?", default="run",
                      choices=("run", "render"))
  parser.add_argument("--smoke", action="store_true",
                      help=f"smaller defaults: {SMOKE}")
  for name, value in DEFAULTS.items():
    parser.add_argument(f"--{name}", type=type(value), default=sizes[name])
  parser.add_argument("--rows", type=int, default=32768,
                      help="buckets per column, and the dynamic capacity")
  parser.add_argument("--dimension", type=int, default=8)
  parser.add_argument("--batch", type=int, default=512)
  parser.add_argument("--zipf_exponent", type=float, default=1.05)
  parser.add_argument("--parts", default=",".join(PARTS),
                      help="which measurements to run, joined by ','; the "
                      "others' figures stay as the results file has them")
  parser.add_argument("--results", default=render.RESULTS)
  parser.add_argument("--page", default=render.PAGE)
  args = parser.parse_args(argv)
  args.parts = [part for part in args.parts.split(",") if part]
  unknown = sorted(set(args.parts) - set(PARTS))
  if unknown or not args.parts:
    parser.error(f"--parts={','.join(args.parts)!r}: valid parts are "
                 f"{', '.join(PARTS)}, at least one")
  for name in ("train", "eval", "quality_rounds", "speed_rounds",
               "speed_steps", "rows", "dimension", "batch", "cut_rows"):
    if getattr(args, name) <= 0:
      parser.error(f"--{name}={getattr(args, name)}: must be > 0")
  text = args.memory_capacities
  try:
    args.memory_capacities = [int(v) for v in text.split(",")]
  except ValueError:
    args.memory_capacities = []
  if len(args.memory_capacities) != 2 or min(args.memory_capacities) <= 0:
    parser.error(f"--memory_capacities={text!r}: two capacities > 0 joined "
                 "by ','")
  return args


def measure(flags, scratch):
  """worker.py with `flags` in a fresh process; its JSON, or None (failed:
  its log says why)."""
  folder = tempfile.mkdtemp(dir=scratch)
  out = os.path.join(folder, "result.json")
  command = [sys.executable, "-m", "tools.bench.dynamic.worker",
             f"--model_dir={folder}/model", f"--out={out}"] + flags
  with open(os.path.join(folder, "log.txt"), "w", encoding="utf-8") as log:
    try:
      subprocess.run(command, stdout=log, stderr=subprocess.STDOUT,
                     cwd=repo.ROOT, timeout=WORKER_LIMIT_S, check=False)
    except subprocess.TimeoutExpired:
      return None
  result = repo.load_json(out)
  print(f"  {' '.join(flags)}: "
        f"{'FAILED, see ' + folder if result is None else 'done'}",
        flush=True)
  return result


PAGE_PARTS = ("quality", "speed", "memory")
"""The parts the page's header dates, unless one was re-run alone."""


def tfra_version():
  """TFRA's version where it is installed, else None."""
  if importlib.util.find_spec("tensorflow_recommenders_addons") is None:
    return None
  return runner._version("tensorflow-recommenders-addons")  # pylint: disable=protected-access


def run(args, previous=None):
  """The results of `args.parts`, over `previous`'s (the others' figures)."""
  # Here, not at the top: it loads TensorFlow, which `render` needs not.
  from tools.bench.dynamic import data  # pylint: disable=g-import-not-at-top
  machine = runner.machine_info()
  scratch = tempfile.mkdtemp(prefix="estimator_scale_dynamic_bench-")
  print(f"dynamic: {machine['summary']}; logs in {scratch}", flush=True)
  root, distinct = data.prepare(args.train, args.eval, args.zipf_exponent)
  common = [f"--data={root}", f"--dimension={args.dimension}",
            f"--batch={args.batch}"]
  tfra = tfra_version()
  if tfra is None:
    print("  TFRA: not installed, its rows are skipped (setup.py's `bench` "
          "extra)", flush=True)
  result = dict(previous or {})
  if "cut" in args.parts:
    result["cut"] = {"rows": args.cut_rows, "machine": machine,
                     "train": args.train, **data.seen_twice(root),
                     "runs": _cut(args, common, scratch)}
    machine = runner.machine_info()  # a fresh load average for the rest
  common.append(f"--rows={args.rows}")
  if "quality" in args.parts:
    result["quality"] = _quality(args, common, tfra, scratch)
  if "speed" in args.parts:
    result["speed"] = _speed(args, common, tfra, scratch)
  if "memory" in args.parts:
    result["memory"] = [
        measure(["--mode=memory", f"--rows={capacity}"], scratch)
        for capacity in args.memory_capacities]
  if set(args.parts) - {"cut"} or not previous:
    machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    settings = {k: getattr(args, k) for k in (
        "train", "eval", "rows", "dimension", "batch", "zipf_exponent",
        "speed_steps", "memory_capacities")}
    settings["columns"] = list(data.COLUMNS)
    settings["repeating"] = REPEATING
    # A part re-run alone keeps its own date and load; a run of all three
    # is the page's.
    alone = [p for p in PAGE_PARTS if p in args.parts]
    if previous and len(alone) < len(PAGE_PARTS):
      result.update({f"{p}_machine": machine for p in alone})
    else:
      result["machine"] = machine
      for part in PAGE_PARTS:
        result.pop(f"{part}_machine", None)
    result.update(settings=settings, distinct_ids=distinct,
                  tfra=tfra, smoke=any(
                      getattr(args, k) < v for k, v in DEFAULTS.items()
                      if isinstance(v, int)))
  else:
    result["cut"]["machine"]["load_average_at_end"] = [
        round(x, 2) for x in os.getloadavg()]
  return result


def _quality(args, common, tfra, scratch):
  quality = {name: [] for name, (table, _) in QUALITY.items()
             if tfra or table != "tfra"}
  for seed in range(args.quality_rounds):
    for name in quality:
      table, min_count = QUALITY[name]
      quality[name].append(measure(
          common + ["--mode=quality", f"--table={table}",
                    f"--min_count={min_count}", f"--seed={seed}"], scratch))
  return quality


def _speed(args, common, tfra, scratch):
  speed = {name: [] for name in SPEED if tfra or name != "tfra"}
  for _ in range(args.speed_rounds):
    for name in speed:
      table, _, repeating = name.partition("_")
      speed[name].append(measure(
          common + ["--mode=speed", f"--table={table}",
                    f"--steps={args.speed_steps}"] +
          ([f"--repeating={REPEATING}"] if repeating else []), scratch))
  return speed


def _cut(args, common, scratch):
  """One epoch of each of `CUT` at `--cut_rows` rows per column."""
  return {name: [measure(common + [
      "--mode=quality", "--table=dynamic", f"--rows={args.cut_rows}",
      f"--min_count={min_count}"], scratch)]
          for name, min_count in CUT.items()}


def main(argv=None):
  args = parse_args(argv)
  if args.action == "run":
    previous = None
    if set(args.parts) != set(PARTS):
      previous = repo.load_json(args.results)
    repo.write(args.results, json.dumps(run(args, previous), indent=1) + "\n")
  print(render.write(args.results, args.page))


if __name__ == "__main__":
  main()

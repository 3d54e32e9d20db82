"""The benchmark suite: the framework against hand-written peers, on this host.

  python -m tools.bench.perf            # make bench
  python -m tools.bench.perf --rerender # the page again from results/

Runs VARIANTS (variants.py) in interleaved rounds (runner.py), turns the
measurements into ROWS (results.py), and writes results/bench.json and
docs/BENCH.md (render.py). `--rerender` rewrites the page alone.
"""
import argparse
import functools
import json
import os
import tempfile

from tools import repo
from tools.bench.perf import render
from tools.bench.perf import results
from tools.bench.perf import runner
from tools.bench.perf import variants


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", default=render.BENCH_JSON)
  parser.add_argument("--markdown", default=render.PAGE)
  parser.add_argument("--rounds", type=int, default=3)
  # The default fits 3 rounds, and `make bench`, within 25 minutes; the
  # scaling groups' windows of >= 20 s and their processes' start are most
  # of a round.
  parser.add_argument("--budget_s", type=float, default=1470.0,
                      help="no new round starts once it would end past this")
  parser.add_argument("--scale", type=float, default=1.0, help="step factor")
  parser.add_argument("--only", default="", help="variants to run (a,b)")
  parser.add_argument("--rerender", action="store_true",
                      help="rewrite --markdown from --out; no runs")
  return parser.parse_args(argv)


def main(argv=None):
  args = parse_args(argv)
  if args.rerender:
    render.rerender(args.out, args.markdown)
    return
  machine = runner.machine_info()
  log_dir = tempfile.mkdtemp(prefix="estimator_scale_bench-")
  print(f"bench: {machine['summary']}; logs in {log_dir}", flush=True)
  only = set(filter(None, args.only.split(",")))
  groups = [[v for v in g if not only or v in only] for g in variants.GROUPS]
  measure_fn = functools.partial(runner.measure_and_report, log_dir=log_dir,
                                 scale=args.scale)
  samples = runner.run_rounds(args.rounds, args.budget_s, measure_fn,
                              [g for g in groups if g])
  machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
  result = results.build_result(
      samples, machine, max((len(s) for s in samples.values()), default=0))
  repo.write(args.out, json.dumps(result, indent=2) + "\n")
  page = render.markdown(result)
  repo.write(args.markdown, page)
  print(page.split("## Machine")[0])


if __name__ == "__main__":
  main()

"""Times wide & deep on one process and on parameter servers, async and sync.

  python -m tools.bench.ps_speed            # make bench-ps-speed
  python -m tools.bench.ps_speed --smoke    # a few minutes: is it working?
  python -m tools.bench.ps_speed render     # the page from the saved JSON

Each round trains the zoo's wide & deep three ways, one after the other: one
process, and a chief, a worker and a ps task on this host
(estimator-scale-launch) asynchronous and with --ps_sync; the same global
batch and threads per op everywhere. Writes results/ps_speed.json and renders
docs/PS_SPEED.md (with tools.datasets.peer's speed results, if any).
"""
import argparse
import functools
import json
import os
import tempfile

from tools import repo
from tools.bench.perf import runner
from tools.bench.ps_speed import job
from tools.bench.ps_speed import render

DEFAULTS = {"rounds": 5, "window_s": 30.0, "warmup_s": 20.0}
SMOKE = {"rounds": 1, "window_s": 5.0, "warmup_s": 5.0}
# Beyond the window and its warm-up: three TensorFlow processes importing,
# building graphs and initialising on a shared machine.
START_LIMIT_S = 240.0


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("action", nargs="?", default="run",
                      choices=("run", "render"))
  parser.add_argument("--smoke", action="store_true", help="small defaults: "
                      + ", ".join(f"--{k}={v:g}" for k, v in SMOKE.items()))
  parser.add_argument("--rounds", type=int)
  parser.add_argument("--window_s", type=float, help="timed seconds per job")
  parser.add_argument("--warmup_s", type=float,
                      help="untimed seconds after the last trainer's first "
                           "update")
  parser.add_argument("--global_batch", type=int, default=256)
  parser.add_argument("--threads", type=int, default=1,
                      help="threads per op, in every process")
  parser.add_argument("--optimizer", default="adagrad")
  parser.add_argument("--budget_s", type=float, default=2400.0,
                      help="no new round starts once it would end past this")
  parser.add_argument("--results", default=render.RESULTS)
  parser.add_argument("--page", default=render.PAGE)
  args = parser.parse_args(argv)
  for name, value in (SMOKE if args.smoke else DEFAULTS).items():
    if getattr(args, name) is None:
      setattr(args, name, value)
  for name in ("rounds", "window_s", "global_batch", "threads"):
    if getattr(args, name) <= 0:
      parser.error(f"--{name}={getattr(args, name)}: must be > 0")
  if args.warmup_s < 0:
    parser.error(f"--warmup_s={args.warmup_s}: must be >= 0")
  if args.global_batch % job.TRAINERS["sync"]:
    parser.error(f"--global_batch={args.global_batch}: must split over "
                 f"{job.TRAINERS['sync']} synchronous trainers")
  return args


def measure_and_report(mode, settings, log_dir):
  """job.run of `mode` in a new folder of `log_dir`, said on stdout."""
  scratch = tempfile.mkdtemp(prefix=f"{mode}-", dir=log_dir)
  result = job.run(mode, settings, scratch, START_LIMIT_S +
                   settings["warmup_s"] + settings["window_s"])
  shown = (f"FAILED, see {scratch}/log.txt" if result is None else
           f"{result['examples_per_sec']:,.0f} ex/s, runs "
           f"{result['runs_by_task']}, global_step +{result['global_steps']}")
  print(f"  {mode}: {shown}", flush=True)
  return result


def main(argv=None):
  args = parse_args(argv)
  if args.action == "run":
    settings = {k: getattr(args, k) for k in (
        "global_batch", "threads", "optimizer", "window_s", "warmup_s")}
    machine = runner.machine_info()
    log_dir = tempfile.mkdtemp(prefix="estimator_scale_ps_speed-")
    print(f"ps_speed: {machine['summary']}; logs in {log_dir}", flush=True)
    samples = runner.run_rounds(
        args.rounds, args.budget_s,
        functools.partial(measure_and_report, settings=settings,
                          log_dir=log_dir), [list(job.MODES)])
    machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result = {"machine": machine, "settings": settings,
              "rounds": len(samples["one"]), "samples": samples,
              "smoke": any(getattr(args, k) < v for k, v in DEFAULTS.items())}
    repo.write(args.results, json.dumps(result, indent=1) + "\n")
  print(render.write(args.results, render.PEER_RESULTS, args.page))


if __name__ == "__main__":
  main()

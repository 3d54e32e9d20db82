"""One benchmark measurement in a fresh process: build, warm up, time, report.

runner.py starts this once per variant and round (under horovodrun or
estimator-scale-launch for multi-process variants) so that every measurement
has its own graph, its own session and its own peak-memory figure. Only the wall
time between the end of warm-up run `--warmup` and the end of run
`--warmup + --steps` counts: graph building, session creation, variable
broadcast and the first runs are excluded alike for every variant.

`--kind=startup` instead times a fresh training process from outside,
start to exit (`time_startup`), for the costs that window leaves out: graph
building, session creation and the first update. That process is this
module again as `--kind=startup_child`, which writes only its milestones.

Each process writes `<--out>.<rank>.json`: examples, seconds, peak RSS.
It runs as `python -m tools.bench.perf.worker` and imports at its top only
what every kind needs, no TensorFlow: the startup kinds time this very
process's start. What trains is in kinds.py, the hooks in timing.py.
"""
import argparse
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

from tools import repo
from tools.bench.perf import usage
from tools.bench.perf import windows

KINDS = ("ours", "hand", "cond_apply", "horovod_script", "pipeline_ours",
         "pipeline_plain", "startup", "startup_child")
MODULE = "tools.bench.perf.worker"


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--kind", choices=KINDS, required=True)
  parser.add_argument("--model", default="digits_cnn")
  parser.add_argument("--batch", type=int, required=True,
                      help="examples one process reads per session run "
                      "(startup: per update, k micro-batches)")
  parser.add_argument("--accumulation_steps", type=int, default=1)
  parser.add_argument("--distribution", default="none")
  parser.add_argument("--lr_scaling", default="identity")
  parser.add_argument("--learning_rate", type=float, default=0.01)
  parser.add_argument("--precision", default="float32")
  parser.add_argument("--allreduce_compression", default="none")
  parser.add_argument("--threads", type=int, default=0,
                      help="intra- and inter-op threads (0: TF's default)")
  parser.add_argument("--warmup", type=int, default=5)
  parser.add_argument("--steps", type=int, default=20,
                      help="timed runs (startup: updates from step 0)")
  parser.add_argument("--windows", default="",
                      help="timed runs per window, comma-separated, paused "
                           "between windows (windows.py); "
                           "replaces --steps")
  parser.add_argument("--rewarm", type=int, default=2,
                      help="untimed runs before each window after the first")
  parser.add_argument("--pause_dir", default=None,
                      help="--windows: where the pauses' handshake files go")
  parser.add_argument("--model_dir", default=None)
  parser.add_argument("--out", required=True)
  return parser.parse_args(argv)


def startup_child_argv(args):
  """The process `--kind=startup` times: its own flags, as startup_child."""
  return [sys.executable, "-m", MODULE, "--kind=startup_child",
          f"--model={args.model}", f"--batch={args.batch}",
          f"--accumulation_steps={args.accumulation_steps}",
          f"--steps={args.steps}", f"--model_dir={args.model_dir}",
          f"--out={args.out}"]


# The fields startup_fields adds, which combine() passes on.
STARTUP_FIELDS = ("session_seconds", "update_examples_per_sec")


def startup_fields(start, milestones, batch):
  """What a startup run adds to the result, from the child's milestones.

  session_seconds: from `start` (taken just before the child started) to
  its session being ready: interpreter and TensorFlow start, graph build,
  session creation, variable initialization, checkpoint 0; no update yet.
  update_examples_per_sec: over the updates after the first, the speed of
  the compute the whole-process time also contains.
  """
  ends = milestones["run_ends"]
  return {"session_seconds": milestones["ready"] - start,
          "update_examples_per_sec":
              batch * (len(ends) - 1) / (ends[-1] - ends[0])}


def time_startup(args):
  """A fresh training process, timed from outside, start to exit.

  The child is this process's only child, so RUSAGE_CHILDREN is that one
  process's own usage; that is why each such measurement runs in a wrapper
  of its own (ru_maxrss of RUSAGE_CHILDREN is the largest over every child
  ever waited for). The wrapper imports no TensorFlow: a child's peak also
  counts the wrapper's pages it maps until exec, a floor far below the
  child's own peak.
  """
  if args.steps < 2:
    raise ValueError("--steps must be >= 2: the rate is taken after update 1")
  child = startup_child_argv(args)
  start = time.time()
  subprocess.run(child, cwd=repo.ROOT, check=True)
  seconds = time.time() - start
  milestones = json.loads(
      pathlib.Path(f"{args.out}.milestones").read_text(encoding="utf-8"))
  result = _result(0, args.batch * args.steps, seconds,
                   usage.cpu_seconds(resource.RUSAGE_CHILDREN),
                   usage.peak_rss_mib(resource.RUSAGE_CHILDREN))
  result.update(startup_fields(start, milestones, args.batch))
  return result


def measure(args):
  """Runs the variant; returns this process's result dict."""
  # Not at the top: the startup wrapper must stay free of TensorFlow.
  from tools.bench.perf import kinds  # pylint: disable=g-import-not-at-top
  args.model_dir = args.model_dir or tempfile.mkdtemp(prefix="bench-model-")
  if args.kind == "startup":
    return time_startup(args)
  window_peak, peak_before = None, 0.0
  if args.kind.startswith("pipeline"):
    examples, seconds, cpu = kinds.time_pipeline(args)
    rank = 0
  else:
    if args.warmup < 1:
      raise ValueError("--warmup must be >= 1: run 1 builds lazily")
    steps = [args.steps]
    if args.windows:  # the first window's figures are the result's own
      steps = [int(s) for s in args.windows.split(",")]
      args.steps = windows.total_runs(args.warmup, steps,
                                      args.rewarm) - args.warmup
    hook = timing_hook(args, steps)
    rank, _ = kinds.TRAINERS[args.kind](args, hook)
    if hook.ended is None or len(hook.windows) < len(steps):
      raise RuntimeError(f"training stopped after {hook.runs} runs, before "
                         f"{args.warmup + args.steps}")
    examples, seconds, cpu = (args.batch * steps[0],
                              hook.ended - hook.started, hook.cpu)
    window_peak, peak_before = hook.window_peak, hook.peak_before
  result = _result(rank, examples, seconds, cpu,
                   max(peak_before, usage.peak_rss_mib()), window_peak)
  if args.windows:
    result["windows"] = [{"examples": args.batch * runs, "seconds": seconds}
                         for runs, seconds in hook.windows]
  return result


def timing_hook(args, steps):
  """The hook that times `steps` (runs per window) after the warm-up."""
  # Not at the top: the startup wrapper must stay free of TensorFlow.
  from tools.bench.perf import timing  # pylint: disable=g-import-not-at-top
  return timing.TimingHook(args.warmup, steps, args.rewarm, args.pause_dir)


def _result(rank, examples, seconds, cpu, peak_mib, window_peak_mib=None):
  """The result dict every kind writes, so runner.py reads one shape."""
  return {"rank": rank, "examples": examples, "seconds": seconds,
          "examples_per_sec": examples / seconds, "cores_used": cpu / seconds,
          "peak_rss_mib": peak_mib, "window_peak_rss_mib": window_peak_mib}


def pin_threads(threads):
  """Gives this process `threads` intra- and inter-op threads (0: defaults).

  Call it first: TensorFlow fixes its process-wide intra-op pool when the
  eager context starts, which Estimator.train does before it reads any
  session config. The framework's own `backends.base.pin_threads` sizes
  that pool, as `intra_op_threads` does in our runs, so every side of a
  pinned row is pinned by the same code. The framework leaves the inter-op
  pool alone; TensorFlow takes its size from TF_NUM_INTEROP_THREADS for
  every session whose config leaves it at 0 (Estimator's default config).
  With `threads` 0 nothing is imported: the startup wrapper runs no
  TensorFlow.
  """
  if not threads:
    return
  os.environ["TF_NUM_INTEROP_THREADS"] = str(threads)
  # Not at the top: with no threads pinned, nothing of TensorFlow loads.
  # pylint: disable-next=g-import-not-at-top
  from estimator_scale.backends import base
  base.pin_threads(threads, requested=True)


def main(argv=None):
  args = parse_args(sys.argv[1:] if argv is None else argv)
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  pin_threads(args.threads)
  if args.kind == "startup_child":  # its wrapper writes the result
    # Not at the top: the startup wrapper must stay free of TensorFlow.
    from tools.bench.perf import kinds  # pylint: disable=g-import-not-at-top
    milestones = kinds.train_startup_child(args)
    with open(f"{args.out}.milestones", "w", encoding="utf-8") as f:
      json.dump(milestones, f)
    return
  result = measure(args)
  with open(f"{args.out}.{result['rank']}.json", "w", encoding="utf-8") as f:
    json.dump(result, f)


if __name__ == "__main__":
  main()

r"""Prints each ps task's peak memory against its fair share of the table.

  .venv/bin/python -m tools.bench.ps_memory --ps=4,2 --optimizer=adam \
      --steps=60 --global_batch_size=256

Each count of ps tasks trains `model.OneTable` (a `rows` x `dim` table) on a
chief, a worker and that many ps tasks for a few steps; a run of the same
job with a 1,024-row table gives the peak of a ps task holding nothing.
A task's figure is its peak less that idle peak; the fair share is the
capacity line's table plus slots over the ps tasks. `--phases` also
prints each ps task's largest resident memory in each phase of the job
(initialisation, checkpoint saves, steps, evaluation, export), sampled every
50 ms, less the idle task's.
"""
import argparse
import os
import re
import sys
import tempfile

from tools.bench.ps_memory import phases
from tools.bench.ps_memory import procs

_CAPACITY = re.compile(r"capacity: variables ([\d.]+) MiB, optimizer slots "
                       r"and state ([\d.]+) MiB")


def _command(ps, rows, args, model_dir):
  return [sys.executable, "-m", "estimator_scale.launcher", "--workers", "1",
          "--ps", str(ps), "--", sys.executable, "-m", "estimator_scale.cli",
          "train", "--model_module=tools.bench.ps_memory.model",
          "--model=one_table", "--distribution=parameter_server",
          f"--optimizer={args.optimizer}", f"--hparams=rows={rows},dim={args.dim}",
          f"--train_steps={args.steps}",
          f"--global_batch_size={args.global_batch_size}",
          "--eval_steps=1", f"--model_dir={model_dir}", "--verbosity=1",
          f"--export_dir={model_dir}/export"]


def _run(ps, rows, args, scratch):
  """({ps task: peak MiB}, table + slots MiB, {phase: {ps task: MiB}}) of
  one job."""
  model_dir = os.path.join(scratch, f"ps{ps}-rows{rows}")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  timeline = []
  peaks, code = procs.watch(_command(ps, rows, args, model_dir), env,
                            model_dir + ".log", every=0.05, timeline=timeline)
  with open(model_dir + ".log") as f:
    output = f.read()
  match = _CAPACITY.search(output)
  if code != 0 or not match:
    sys.exit(f"the job on {ps} ps tasks failed ({code}):\n{output[-3000:]}")
  total = float(match.group(1)) + float(match.group(2))
  names = sorted(name for name in peaks if name.startswith("ps:"))
  by_phase = phases.peaks_by_phase(timeline, output, names)
  return ({name: procs.mib(peaks[name]) for name in names}, total,
          {phase: {name: procs.mib(size) for name, size in row.items()}
           for phase, row in by_phase.items()})


def _print_phases(ps, by_phase, idle):
  print(f"\n{ps} ps tasks: largest resident memory above idle, MiB")
  names = sorted({name for row in by_phase.values() for name in row})
  print("| phase | " + " | ".join(names) + " |")
  print("|---|" + "---|" * len(names))
  for phase, row in by_phase.items():
    print(f"| {phase} | " + " | ".join(
        f"{row[name] - idle:.0f}" if name in row else "-" for name in names)
          + " |")


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--ps", default="4,2", help="ps task counts, e.g. 4,2")
  parser.add_argument("--optimizer", default="adam")
  parser.add_argument("--rows", type=int, default=1 << 22)
  parser.add_argument("--dim", type=int, default=32)
  parser.add_argument("--steps", type=int, default=2)
  parser.add_argument("--global_batch_size", type=int, default=16)
  parser.add_argument("--phases", action="store_true",
                      help="also print each phase's resident memory")
  args = parser.parse_args(argv)
  counts = [int(n) for n in args.ps.split(",")]
  with tempfile.TemporaryDirectory(prefix="ps_memory-") as scratch:
    idle = min(_run(min(counts), 1024, args, scratch)[0].values())
    print(f"idle ps task: {idle:.0f} MiB peak; table {args.rows} x {args.dim},"
          f" {args.optimizer}")
    print("| ps tasks | table + slots MiB | fair share MiB | peak above idle "
          "per task MiB | largest / fair share |")
    print("|---|---|---|---|---|")
    tables = {}
    for ps in counts:
      peaks, total, tables[ps] = _run(ps, args.rows, args, scratch)
      share = total / ps
      above = [peaks[name] - idle for name in sorted(peaks)]
      print(f"| {ps} | {total:.0f} | {share:.0f} | "
            f"{', '.join(f'{mib:.0f}' for mib in above)} | "
            f"{max(above) / share:.2f} |", flush=True)
    if args.phases:
      for ps, by_phase in tables.items():
        _print_phases(ps, by_phase, idle)


if __name__ == "__main__":
  main()

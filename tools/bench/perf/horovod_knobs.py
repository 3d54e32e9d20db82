"""What each Horovod knob buys on this host, through the CLI as users run it.

  python -m tools.bench.perf.horovod_knobs   # results/horovod_knobs.json

resnet20 on synthetic data, 32 examples per replica per update, one
intra-op thread per process, `--updates` updates: the setup of the bench's
weak-scaling rows, through the CLI.
Each variant is a fresh CLI run (1 process, 2 Horovod ranks under one
setting of the environment, or 2 multi_worker_mirrored workers); a round runs
every variant once, so they alternate, and each figure is the median over
rounds of the CLI's own examples/sec (its summary_json). The result is
rendered into docs/BENCH.md's "Horovod knobs" section.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from estimator_scale import environment
from estimator_scale.backends.horovod import binding as horovod_backend
from tools import repo
from tools.bench.perf import render
from tools.bench.perf import runner

CLI = [sys.executable, "-m", "estimator_scale.cli", "--model=resnet20",
       "--intra_op_threads=1", "--save_checkpoints_steps=1000000",
       "--log_every_n_steps=1000000"]
PER_REPLICA = 32
SINGLE = "1 process"
BINDING = environment.CORE_BINDING
# name -> (processes, launcher, environment). A variant that sets nothing
# gets the framework's defaults: each rank bound to its share of the cores
# (backends/horovod/binding.py bind_to_cores) and HOROVOD_DEFAULTS
# (HOROVOD_CYCLE_TIME=5). Each other Horovod variant changes one of them;
# the last sets Horovod's own settings back (unbound, 1 ms cycle).
VARIANTS = {
    SINGLE: (1, "python", {}),
    "2 Horovod ranks, framework defaults": (2, "horovodrun", {}),
    f"2 Horovod ranks, unbound ({BINDING}=none)": (2, "horovodrun",
                                                   {BINDING: "none"}),
    "2 Horovod ranks, HOROVOD_CYCLE_TIME=1": (2, "horovodrun",
                                              {"HOROVOD_CYCLE_TIME": "1"}),
    "2 Horovod ranks, HOROVOD_CYCLE_TIME=10": (2, "horovodrun",
                                               {"HOROVOD_CYCLE_TIME": "10"}),
    "2 Horovod ranks, HOROVOD_FUSION_THRESHOLD=0 (no fusion)": (
        2, "horovodrun", {"HOROVOD_FUSION_THRESHOLD": "0"}),
    "2 Horovod ranks, Horovod's own settings (unbound, HOROVOD_CYCLE_TIME=1)":
        (2, "horovodrun", {BINDING: "none", "HOROVOD_CYCLE_TIME": "1"}),
    "2 multi_worker_mirrored workers": (2, "launch", {}),
}
# Every setting some variant changes: a variant that does not change one
# runs with it unset, whatever the caller's environment holds.
_KNOBS = set(horovod_backend.HOROVOD_DEFAULTS).union(
    *(environment for _, _, environment in VARIANTS.values()))


def command(processes, launcher, model_dir, summary, updates):
  """The CLI command line of one variant."""
  flags = [f"--global_batch_size={PER_REPLICA * processes}",
           f"--train_steps={updates}", f"--model_dir={model_dir}",
           f"--summary_json={summary}"]
  distribution = {"horovodrun": ["--distribution=horovod"],
                  "launch": ["--distribution=multi_worker_mirrored"]}
  return runner.launcher_argv(launcher, processes,
                              CLI + flags + distribution.get(launcher, []))


def measure(name, updates, timeout):
  """examples/sec of one fresh run of variant `name` (None if it failed)."""
  processes, launcher, environment = VARIANTS[name]
  work = tempfile.mkdtemp(prefix="horovod_knobs-")
  summary = os.path.join(work, "summary.json")
  env = dict(os.environ, TF_NUM_INTRAOP_THREADS="1",
             TF_NUM_INTEROP_THREADS="1", TF_CPP_MIN_LOG_LEVEL="2",
             **environment)
  for key in _KNOBS - set(environment):  # unset: the framework's own
    env.pop(key, None)
  try:
    subprocess.run(command(processes, launcher, os.path.join(work, "model"),
                           summary, updates), env=env, cwd=repo.ROOT,
                   check=True, timeout=timeout, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    with open(summary, encoding="utf-8") as f:
      return json.load(f)["examples_per_sec"]
  except (subprocess.SubprocessError, OSError, KeyError, ValueError) as e:
    print(f"  {name}: failed ({e})", flush=True)
    return None


def summarise(samples):
  """Per variant: median examples/sec, and per-round ratios to 1 process."""
  rows = []
  for name, values in samples.items():
    ratios = [v / s for v, s in zip(values, samples[SINGLE])
              if v is not None and s]
    done = [v for v in values if v is not None]
    rows.append({"variant": name,
                 "examples_per_sec": statistics.median(done) if done else None,
                 "ratio_to_1_process": (statistics.median(ratios)
                                        if ratios else None),
                 "ratios_per_round": [round(r, 3) for r in ratios],
                 "environment": VARIANTS[name][2]})
  return rows


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out", default=render.KNOBS_JSON)
  parser.add_argument("--rounds", type=int, default=2)
  parser.add_argument("--updates", type=int, default=250)
  parser.add_argument("--only", nargs="*", default=None,
                      help="variant names (default: all)")
  parser.add_argument("--timeout", type=float, default=300.0)
  args = parser.parse_args(argv)
  names = [n for n in VARIANTS if args.only is None or n in args.only]
  if SINGLE not in names:
    names.insert(0, SINGLE)
  samples = {n: [] for n in names}
  for index in range(args.rounds):
    for name in names:
      samples[name].append(measure(name, args.updates, args.timeout))
      print(f"round {index + 1}: {name}: {samples[name][-1]}", flush=True)
  result = {"updates": args.updates, "rounds": args.rounds,
            "examples_per_replica": PER_REPLICA, "rows": summarise(samples)}
  with open(args.out, "w", encoding="utf-8") as f:
    json.dump(result, f, indent=1)
  render.rerender()
  for row in result["rows"]:
    print(f"{row['variant']}: {row['examples_per_sec']} ex/s, "
          f"x{row['ratio_to_1_process']} {row['ratios_per_round']}")


if __name__ == "__main__":
  main()

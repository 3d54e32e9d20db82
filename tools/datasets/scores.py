r"""Held-out accuracy and AUC of the census and movielens models: one process
and a parameter-server cluster of 2 workers and 1 ps task.

  .venv/bin/python -m tools.datasets.scores census movielens \
      --work_dir=/tmp/scores --out=/tmp/scores/scores.json

Each run trains through the command line (the cluster through the
launcher) with the same flags and number of updates, then one process
evaluates its last checkpoint on the whole held-out split, so every run is
scored alike. Only the cluster's global batch differs: the one process's
times its 3 trainers (the chief and 2 workers), since each asynchronous
update reads one trainer's share, so that every update of either run
reads as many examples. Extract the data first (`python -m tools.datasets`).
"""
import argparse
import json
import os
import re
import subprocess
import sys

from tools import repo

RUNS = {
    "census": {"optimizer": "adagrad", "learning_rate": 0.05,
               "global_batch_size": 64, "train_steps": 2000},
    "movielens": {"optimizer": "adagrad", "learning_rate": 0.5,
                  "global_batch_size": 256, "train_steps": 3000},
}
"""Each model's training flags: about 4 epochs of census, 10 of MovieLens."""
CLUSTERS = {"1 process": ([], 1),
            "PS 2 workers + 1 ps": (["--workers", "2", "--ps", "1"], 3)}
"""Each run's launcher arguments and trainers (a chief with --ps)."""


def _run(command):
  proc = subprocess.run(command, cwd=repo.ROOT, capture_output=True,
                        text=True, check=False,
                        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  if proc.returncode != 0:
    sys.exit(f"{' '.join(command)} exited {proc.returncode}:\n"
             f"{proc.stderr[-3000:]}")
  return proc.stdout + proc.stderr


def score(model, cluster, model_dir):
  """{metric: value} of one run, evaluated in one process afterwards."""
  cli = [sys.executable, "-m", "estimator_scale.cli"]
  launcher, trainers = CLUSTERS[cluster]
  flags = dict(RUNS[model], global_batch_size=(
      RUNS[model]["global_batch_size"] * trainers))
  train = cli + ["train", f"--model={model}", f"--model_dir={model_dir}"] + [
      f"--{flag}={value}" for flag, value in flags.items()]
  if launcher:
    train = ([sys.executable, "-m", "estimator_scale.launcher",
              *launcher, "--"] + train +
             ["--distribution=parameter_server"])
  _run(train)
  output = _run(cli + ["evaluate", f"--model={model}",
                       f"--model_dir={model_dir}"])
  line = re.search(r"eval of \S+: (.*)", output).group(1)
  return {k: float(v) for k, v in
          (part.split("=") for part in line.split(", "))}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("models", nargs="+", choices=sorted(RUNS))
  parser.add_argument("--work_dir", required=True,
                      help="model directories go here (must not exist)")
  parser.add_argument("--out", help="also write the scores here as JSON")
  args = parser.parse_args(argv)
  if os.path.exists(args.work_dir):
    sys.exit(f"--work_dir={args.work_dir} exists; give a new folder")
  results = {}
  print("| model | run | accuracy | AUC | global step |\n|---|---|---|---|---|")
  for model in args.models:
    for cluster in CLUSTERS:
      name = f"{model}-{cluster.split()[0].lower()}"
      metrics = score(model, cluster, os.path.join(args.work_dir, name))
      results[f"{model}, {cluster}"] = metrics
      print(f"| {model} | {cluster} | {metrics['accuracy']:.4f} | "
            f"{metrics['auc']:.4f} | {metrics['global_step']:.0f} |",
            flush=True)
  if args.out:
    with open(args.out, "w", encoding="utf-8") as f:
      json.dump({"flags": RUNS, "scores": results}, f, indent=2)


if __name__ == "__main__":
  main()

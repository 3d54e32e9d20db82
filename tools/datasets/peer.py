r"""The census and movielens models against DeepCTR's WDLEstimator.

DeepCTR 0.9.4 (installed by the setup with --no-deps) is a wide & deep
library others use; its WDLEstimator takes feature columns, so it gets each
zoo model's own columns (census: the wide and the deep columns; movielens:
the user and movie ids as the linear part, the deep columns as the DNN),
hidden units, input (the model's `input_fn`: the same TFRecords, batches and
order) and one process. DeepCTR keeps its own optimizers (FTRL for the
linear part, Adagrad for the DNN, at its default rates) and its loss
(summed over the batch).

  .venv/bin/python -m tools.datasets.peer auc census --work_dir=/tmp/peer
  .venv/bin/python -m tools.datasets.peer speed census \
      --work_dir=/tmp/peer_speed --threads=2

`auc` trains both as `tools.datasets.scores` trains the zoo model and
scores them alike on the whole held-out split (predictions, then
scikit-learn's AUC and accuracy at 0.5). `speed` times each one's training
examples per second over a window after a warm-up, in one process whose
thread pool both share, in rounds that alternate them: a benchmark, to run
on a quiet machine. It writes tools/bench/ps_speed/results/peer_speed.json
and renders docs/PS_SPEED.md from it.
"""
import argparse
import json
import os
import sys

# Before TensorFlow loads (through the imports below), which reads it then.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# pylint: disable=g-import-not-at-top,wrong-import-position
from deepctr.estimator import WDLEstimator
import numpy as np
from sklearn import metrics
import tensorflow as tf

import estimator_scale as es
from model_zoo import census
from model_zoo import movielens
from tools import repo
from tools.bench.perf import runner
from tools.bench.perf.timing import TimingHook
from tools.bench.ps_speed import render as ps_speed_render
from tools.datasets.scores import RUNS
# pylint: enable=g-import-not-at-top,wrong-import-position

ModeKeys = tf.estimator.ModeKeys
PREDICTION = {"estimator_scale": "logistic", "deepctr": "pred"}
"""The key of each one's click probability in its predictions."""
SPEED_DEFAULTS = {"steps": 6000, "rounds": 5}
"""`speed`'s measurement; fewer updates or rounds make a smoke run."""


def _movielens_ids(params):
  """The ids the movielens model gives a bias each: DeepCTR's linear part."""
  del params
  return [column.categorical_column for column in movielens.bias_columns()]


MODELS = {"census": (census.Census, census.wide_columns, census.deep_columns),
          "movielens": (movielens.MovieLens, _movielens_ids,
                        movielens.deep_columns)}
"""Each zoo model, and its columns for DeepCTR's linear part and DNN."""


def estimators(name, work_dir, threads=None):
  """{"estimator_scale": ..., "deepctr": ...} over the same columns."""
  model_class, linear, deep = MODELS[name]
  model = model_class()
  params = model.default_hparams()
  ours, theirs = (es.build_run_config(
      "none", model_dir=os.path.join(work_dir, who), random_seed=0,
      intra_op_threads=threads) for who in PREDICTION)
  return {
      "estimator_scale": es.make_estimator(
          model, scale_config=ours,
          training_config=es.TrainingConfig(
              optimizer=RUNS[name]["optimizer"],
              learning_rate=RUNS[name]["learning_rate"])),
      "deepctr": WDLEstimator(
          linear(params), deep(params),
          dnn_hidden_units=params["hidden_units"], config=theirs.run_config),
  }


def _input(name, mode, batch):
  model = MODELS[name][0]()
  return model.input_fn(mode, batch, model.default_hparams())


def score(name, estimator, key):
  """(AUC, accuracy at 0.5) of the estimator's predictions on the held-out
  split."""
  test = _input(name, ModeKeys.EVAL, 1024)
  labels = np.concatenate([batch.numpy() for _, batch in test()])
  scores = np.concatenate([
      p[key] for p in estimator.predict(test, predict_keys=[key],
                                        yield_single_examples=False)])
  scores = scores.reshape(-1)
  return (float(metrics.roc_auc_score(labels, scores)),
          float(np.mean((scores > 0.5) == labels)))


def run_auc(name, work_dir):
  steps = RUNS[name]["train_steps"]
  batch = RUNS[name]["global_batch_size"]
  print(f"| {name} | AUC | accuracy | updates |\n|---|---|---|---|")
  for who, estimator in estimators(name, work_dir).items():
    estimator.train(_input(name, ModeKeys.TRAIN, batch), max_steps=steps)
    auc, accuracy = score(name, estimator, PREDICTION[who])
    print(f"| {who} | {auc:.4f} | {accuracy:.4f} | {steps} |", flush=True)


def run_speed(name, work_dir, threads, warmup, steps, rounds, out):
  """Times both in each round, ours first, and writes `out` and the page."""
  batch = RUNS[name]["global_batch_size"]
  machine = runner.machine_info()
  samples = {who: [] for who in PREDICTION}
  for index in range(rounds):
    trained = estimators(name, os.path.join(work_dir, f"round{index}"),
                         threads)
    for who, estimator in trained.items():
      timing = TimingHook(warmup, [steps])
      estimator.train(_input(name, ModeKeys.TRAIN, batch), hooks=[timing],
                      max_steps=warmup + steps + 1)
      (runs, seconds), = timing.windows
      samples[who].append({"examples_per_sec": runs * batch / seconds,
                           "seconds": seconds})
      print(f"round {index + 1}: {who} {runs * batch / seconds:,.0f} "
            "examples/sec", flush=True)
  machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
  repo.write(out, json.dumps(
      {"machine": machine, "model": name, "threads": threads,
       "warmup": warmup, "steps": steps, "global_batch": batch,
       "rounds": rounds, "samples": samples,
       "smoke": steps < SPEED_DEFAULTS["steps"] or
                rounds < SPEED_DEFAULTS["rounds"]}, indent=1) + "\n")
  print(ps_speed_render.write())


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("what", choices=["auc", "speed"])
  parser.add_argument("model", choices=sorted(RUNS))
  parser.add_argument("--work_dir", required=True,
                      help="model directories go here (must not exist)")
  parser.add_argument("--threads", type=int, default=1,
                      help="speed: threads per op, the same for both")
  parser.add_argument("--warmup", type=int, default=100,
                      help="speed: untimed updates first")
  parser.add_argument("--steps", type=int, default=SPEED_DEFAULTS["steps"],
                      help="speed: timed updates")
  parser.add_argument("--rounds", type=int, default=SPEED_DEFAULTS["rounds"],
                      help="speed: rounds, each timing both")
  parser.add_argument("--out", default=ps_speed_render.PEER_RESULTS,
                      help="speed: the results' JSON (docs/PS_SPEED.md is "
                           "rendered from the default's)")
  args = parser.parse_args(argv)
  if os.path.exists(args.work_dir):
    sys.exit(f"--work_dir={args.work_dir} exists; give a new folder")
  if args.what == "auc":
    run_auc(args.model, args.work_dir)
  else:
    for flag in ("threads", "warmup", "steps", "rounds"):
      if getattr(args, flag) < 1:
        sys.exit(f"--{flag}={getattr(args, flag)}: must be >= 1")
    run_speed(args.model, args.work_dir, args.threads, args.warmup,
              args.steps, args.rounds, args.out)


if __name__ == "__main__":
  main()

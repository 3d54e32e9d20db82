"""Shared helpers: the venv's tools, quiet TensorFlow, subprocess runners."""
import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable
HOROVODRUN = os.path.join(os.path.dirname(sys.executable), "horovodrun")


def worker_env():
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  env.pop("TF_CONFIG", None)
  return env


def run(command, timeout=240, check=True, env=None):
  """Runs a command from the repo root; returns the CompletedProcess."""
  proc = subprocess.run(command, cwd=ROOT, env=env or worker_env(),
                        capture_output=True, text=True, timeout=timeout)
  if check and proc.returncode != 0:
    raise AssertionError(f"{command} exited {proc.returncode}:\n"
                         f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
  return proc


# AdaScale's gain for two gradient samples (the rows), S = n = 2, one update:
# (rows, gain, tolerance). Each row's gradient is its input (SumLinear).
GOLDEN_GAINS = [([[1, 0], [0, 1]], 4 / 3, 1e-6), ([[1, 1], [1, 1]], 1.0, 1e-5),
                ([[-1, 1], [1, -1]], 2.0, 1e-6),
                ([[1, 4], [5, 0.5]], 1.4688796680497926, 1e-6)]


def horovodrun_argv(np_, args):
  """`horovodrun` of `np_` local ranks running this Python with `args`."""
  return [HOROVODRUN, "--gloo", "-np", str(np_), "-H", f"localhost:{np_}",
          PYTHON] + args


def horovod(np_, args, **kwargs):
  return run(horovodrun_argv(np_, args), **kwargs)


def launch(workers, args, **kwargs):
  return run([PYTHON, "-m", "estimator_scale.launch", "--workers",
              str(workers), "--", PYTHON] + args, **kwargs)


def dump_args(out, model_dir=None, **flags):
  args = ["-m", "tests.workers.dump_run", f"--out_dir={out}"]
  if model_dir:
    args.append(f"--model_dir={model_dir}")
  return args + [f"--{k}={v}" for k, v in flags.items()]


def load_workers(out):
  """[{variable name: value}] per worker, in worker order."""
  files = sorted(glob.glob(os.path.join(out, "worker*.npz")))
  return [dict(np.load(f)) for f in files]


def load_results(out):
  files = sorted(glob.glob(os.path.join(out, "result*.json")))
  return [json.load(open(f)) for f in files]


def trained_variables(worker):
  """The model's variables (first replica copy), without bookkeeping."""
  return {k.split("@")[0]: v for k, v in worker.items()
          if k.startswith("model/") and k.endswith("@0")}


def max_difference(a, b):
  assert sorted(a) == sorted(b), (sorted(a), sorted(b))
  return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


@pytest.fixture
def fresh_graph():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.compat.v1.reset_default_graph()
  yield

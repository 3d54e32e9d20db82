"""What workers wrote (tests.workers.dump_run), read back and compared."""
import glob
import json
import os

import numpy as np


def load_workers(out):
  """[{variable name: value}] per worker, in worker order."""
  files = sorted(glob.glob(os.path.join(out, "worker*.npz")))
  return [dict(np.load(f)) for f in files]


def load_results(out):
  """[the result JSON] per worker, in worker order."""
  results = []
  for path in sorted(glob.glob(os.path.join(out, "result*.json"))):
    with open(path, encoding="utf-8") as f:
      results.append(json.load(f))
  return results


def trained_variables(worker):
  """The model's variables (first replica copy), without bookkeeping."""
  return {k.split("@")[0]: v for k, v in worker.items()
          if k.startswith("model/") and k.endswith("@0")}


def max_difference(a, b):
  """The largest absolute difference between two {name: array} with the
  same names."""
  assert sorted(a) == sorted(b), (sorted(a), sorted(b))
  return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)

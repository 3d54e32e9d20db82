"""The data and commands of the canned-estimator jobs over dynamic columns
(tests/workers/dynamic_canned.py), shared by the tests that start them and
read what they leave; the worker's flags stay in the worker's process."""
import json

import numpy as np

from tests.helpers import shared
from tests.helpers.processes import PYTHON, horovod, run

EXAMPLES = 200
BATCH = 48
"""Split evenly over 1, 2 and 3 processes, which resume each other."""
KNOWN = 20
CAPACITY = {"user": 400, "item": 300}
"""Each column's table capacity: room for every id, so none is evicted."""
TABLE = "input_from_feature_columns/input_layer/{}_embedding/embedding_weights"
"""A column's table in the checkpoint, by the column's key."""


def data():
  """({feature: array}, labels) of the examples."""
  rng = np.random.RandomState(0)
  users = rng.randint(1 << 20, 1 << 60, EXAMPLES, dtype=np.int64)
  items = rng.randint(1 << 20, 1 << 60, EXAMPLES, dtype=np.int64)
  return ({"user": users[:, None], "item": items[:, None]},
          rng.randint(0, 2, EXAMPLES).astype(np.int64))


def args(root, distribution, steps):
  """The worker's argv after the interpreter, for a job whose model_dir
  and results are under `root`."""
  return ["-m", "tests.workers.dynamic_canned",
          f"--distribution={distribution}", f"--model_dir={root / 'model'}",
          f"--out_dir={root / 'out'}", f"--steps={steps}"]


def result(root):
  """What the chief of the job under `root` wrote."""
  return json.loads((root / "out" / "result.json").read_text())


def train(root, processes, steps):
  """Trains the worker in `root` to `steps` on `processes` (1: one process,
  else Horovod ranks); the CompletedProcess."""
  if processes == 1:
    return run([PYTHON] + args(root, "none", steps), timeout=300)
  return horovod(processes, args(root, "horovod", steps), timeout=400)


def trained(tmp_path_factory, processes, steps):
  """The root of a job trained from scratch to `steps` on `processes`,
  once a session whatever the tests that ask (`shared.once`): read it, or
  copy it to go on from it."""
  return shared.once(tmp_path_factory,
                     f"dynamic-canned-{processes}-processes-{steps}-steps",
                     lambda root: train(root, processes, steps))

"""The reference runs of tests/workers/dynamic_equivalence.py: each config
trained 20 updates on one process and on 2 Horovod ranks, once a session
(`shared.once`), which several tests compare with or resume from: read
them, or copy them to go on from them."""
from tests.helpers import shared
from tests.helpers.processes import PYTHON, horovod, run

ARGS = ["-m", "tests.workers.dynamic_equivalence"]


def two_ranks(tmp_path_factory):
  """The model_dir of each config trained 20 updates on 2 ranks, with its
  compact export under `compact/<config>`."""

  def train(directory):
    horovod(2, ARGS + [f"--model_dir={directory}", "--distribution=horovod",
                       f"--compact_export_dir={directory / 'compact'}"],
            timeout=480)
  return shared.once(tmp_path_factory, "dynamic-equivalence-two-ranks", train)


def one_process(tmp_path_factory):
  """The model_dir of each config trained 20 updates on one process,
  evaluated, with its export under `export/<config>`."""

  def train(directory):
    run([PYTHON] + ARGS + [f"--model_dir={directory}", "--evaluate",
                           f"--export_dir={directory / 'export'}"],
        timeout=480)
  return shared.once(tmp_path_factory, "dynamic-equivalence-one-process",
                     train)

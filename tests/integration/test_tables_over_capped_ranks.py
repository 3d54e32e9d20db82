"""Tables whose rows and slots exceed every rank's memory train, evaluate
and export on Horovod ranks each capped below them.

Each of 4 ranks runs in a memory cgroup of its own (`tests.helpers.capped`),
as on a host with that much memory: the kernel kills a rank past its cap.
A sharded table of 2^22 x 32 and a dynamic one of 2^21 x 32 with Adagrad
hold 1.6 GiB of rows and slots, more than the 1,400 MiB cap. Evaluation
reads the rows on the ranks and the export copies them a block at a time,
so no rank ever holds a table whole (before, rank 0 was killed as it
evaluated).
"""
import json
import os
import re
import shutil

import pytest

from tests.helpers.processes import horovod
from tests.helpers.processes import PYTHON
from tests.helpers.processes import run
from tests.helpers.processes import worker_env

RANKS = 4
CAP_MIB = 1400
VOCABULARY, CAPACITY, DIMENSION = 1 << 22, 1 << 21, 32


def _table_mib():
  """Rows and Adagrad's slot of both tables, and the dynamic table's ids,
  update numbers and counts (int64 each)."""
  rows = (VOCABULARY + CAPACITY) * DIMENSION * 4 * 2
  return (rows + CAPACITY * 3 * 8) / (1 << 20)


@pytest.mark.skipif(not os.access("/sys/fs/cgroup/memory", os.W_OK),
                    reason="needs root and cgroup v1's memory controller")
def test_ranks_capped_below_the_tables_train_evaluate_and_export(tmp_path):
  assert _table_mib() > CAP_MIB
  reports = tmp_path / "reports"
  reports.mkdir()
  try:
    horovod(RANKS, [
        "-m", "tests.helpers.capped", f"--limit_mib={CAP_MIB}",
        f"--report={reports}/rank{{rank}}.json", "--", PYTHON,
        "-m", "tests.workers.evaluation_on_ranks",
        f"--model_dir={tmp_path / 'model'}", f"--out_dir={tmp_path / 'out'}",
        f"--export_dir={tmp_path / 'export'}", f"--vocabulary={VOCABULARY}",
        f"--capacity={CAPACITY}", f"--dimension={DIMENSION}", "--steps=4"],
            timeout=400)
    for rank in range(RANKS):
      with open(reports / f"rank{rank}.json") as f:
        report = json.load(f)
      assert report["exit"] == 0 and report["oom_kills"] == 0, (rank, report)
      with open(tmp_path / "out" / f"eval-rank{rank}.json") as f:
        assert json.load(f)["global_step"] == 4
    exported = list((tmp_path / "export").iterdir())
    assert len(exported) == 1
    variables = sum(f.stat().st_size for f in
                    (exported[0] / "variables").iterdir())
    # The rows of both tables (no slots), in the SavedModel's variables.
    assert variables >= (VOCABULARY + CAPACITY) * DIMENSION * 4
  finally:  # gigabytes of checkpoints
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.skipif(not os.access("/sys/fs/cgroup/memory", os.W_OK),
                    reason="needs root and cgroup v1's memory controller")
def test_tables_larger_than_the_cap_are_refused_before_training(tmp_path):
  """Inside a memory cgroup the job's ceiling is the cgroup's limit, not
  the host's memory: a table of 1 GiB with its slot, capped at 700 MiB,
  stops before any session, in one line naming the limit and its file."""
  proc = run([PYTHON, "-m", "tests.helpers.capped", "--limit_mib=700",
              f"--report={tmp_path}/report.json", "--", PYTHON, "-m",
              "estimator_scale.cli", "train",
              "--model_module=tools.bench.ps_memory.model", "--model=one_table",
              "--optimizer=adagrad", f"--hparams=rows={1 << 22},dim=32",
              "--train_steps=2", f"--model_dir={tmp_path / 'model'}"],
             check=False, timeout=300)
  output = proc.stdout + proc.stderr
  assert proc.returncode == 2, output[-3000:]
  (line,) = [l for l in output.splitlines() if "estimator-scale: error:" in l]
  assert re.search(r"each worker of --distribution=none holds all of them, "
                   r"1024\.\d MiB .* above the 700\.0 MiB a task may hold "
                   r"\(this task's memory cgroup limit, /sys/fs/cgroup/memory/"
                   r"estimator_scale_capped_\d+/memory\.limit_in_bytes; ", line), (
                       line)
  with open(tmp_path / "report.json") as f:
    assert json.load(f)["oom_kills"] == 0


def test_shards_larger_than_a_rank_may_hold_are_refused_before_training(
    tmp_path):
  """A rank's shard of the split tables (rows, Adagrad's slot, a dynamic
  table's bookkeeping) counts toward what it holds: 2 ranks whose shards
  are 96 MiB each, allowed 64 MiB, stop before their first step."""
  proc = horovod(2, [
      "-m", "tests.workers.evaluation_on_ranks",
      f"--model_dir={tmp_path / 'model'}", f"--out_dir={tmp_path / 'out'}",
      f"--vocabulary={1 << 19}", f"--capacity={1 << 18}", "--dimension=32",
      "--steps=2"], check=False, timeout=300,
                 env=dict(worker_env(),
                          ESTIMATOR_SCALE_TASK_MEMORY_BYTES=str(64 << 20)))
  output = proc.stdout + proc.stderr
  assert proc.returncode != 0, output[-3000:]
  assert re.search(r"each worker of distribution=horovod holds its shard of "
                   r"the split tables and every other variable, 9\d\.\d MiB "
                   r".* above the 64\.0 MiB a task may hold "
                   r"\(ESTIMATOR_SCALE_TASK_MEMORY_BYTES; .* add ranks", output), (
                       output[-3000:])
  assert not (tmp_path / "model" / "checkpoint").exists()

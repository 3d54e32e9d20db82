"""Tables that cannot fit where they would go are refused before training,
in one line that says what each task would hold, what it may hold and
where that number comes from: a process's memory cgroup limit (its
container's, its Slurm step's, its host's), or a Horovod rank's shard of
the tables split over the ranks. (Tables larger than a host that do fit
over the hosts: tests/multihost/test_tables_over_capped_hosts.py.)
"""
import json
import os
import re

import pytest

from tests.helpers.processes import horovod
from tests.helpers.processes import PYTHON
from tests.helpers.processes import run
from tests.helpers.processes import worker_env


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


_OVER_ITS_CAP = (
    "import os, sys, time\n"
    "import estimator_scale as es\n"
    "es.build_run_config('horovod', model_dir=sys.argv[1])\n"
    "if os.environ['HOROVOD_RANK'] == '1':\n"
    "  held = b'x' * (600 << 20)\n"
    "time.sleep(15)\n")
"""A rank 1 that holds more than its cgroup allows, once the job runs."""


@pytest.mark.skipif(not os.access("/sys/fs/cgroup/memory", os.W_OK),
                    reason="needs root and cgroup v1's memory controller")
def test_a_rank_killed_for_memory_is_named_under_horovodrun(tmp_path):
  """The kernel kills without a word and horovodrun says only "exit with
  status code 137": the rank's watcher names the rank, its host, its limit
  and its peak, and only for the rank killed."""
  proc = horovod(2, ["-m", "tests.helpers.capped", "--limit_mib=400",
                     f"--report={tmp_path}/report{{rank}}.json", "--",
                     PYTHON, "-c", _OVER_ITS_CAP, str(tmp_path / "model")],
                 check=False, timeout=300)
  output = proc.stdout + proc.stderr
  assert proc.returncode != 0, output[-3000:]
  lines = [l for l in output.splitlines()
           if "estimator-scale: out of memory:" in l]
  assert len(lines) == 1, output[-3000:]
  assert re.search(
      r"Horovod rank 1 on \S+ was killed by the out-of-memory killer at its "
      r"memory cgroup's limit of 400 MiB \(/sys/fs/cgroup/memory/"
      r"estimator_scale_capped_\d+/memory\.limit_in_bytes\); give the job "
      r"more hosts or more memory per host .* \(peak 400 MiB\)$", lines[0]), (
          lines[0])
  with open(tmp_path / "report1.json") as f:
    assert json.load(f)["oom_kills"] >= 1

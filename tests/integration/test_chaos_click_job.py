"""The chaos driver's click job and its judge, without a rig.

The job (`position_run --case click`: a table sharded over the ranks per
id column) trains on 2 Horovod ranks; `fault_free.compare` then trains the
same data and global batch in one process and predicts the held-out clicks
from both checkpoints, reading the ranks' sharded tables whole. A job
without a fault must be the fault-free run to rounding, and have learnt.
"""
from tests.helpers.processes import horovod
from tools.rig.chaos import core
from tools.rig.chaos import fault_free

_STEPS, _BATCH = 200, 16


def test_a_job_without_faults_is_the_fault_free_run(tmp_path):
  horovod(2, ["-m", "tests.workers.position_run", "--case=click",
              "--distribution=horovod",
              f"--examples={core.CASES['click']}",
              f"--global_batch_size={_BATCH}", f"--max_steps={_STEPS}",
              f"--model_dir={tmp_path / 'model'}",
              f"--out_dir={tmp_path / 'ids'}", "--run=chaos"])
  compared = fault_free.compare(str(tmp_path), _BATCH, "click")
  print(compared)
  assert compared["step"] == _STEPS
  assert compared["max_abs_diff"] <= 1e-5, compared
  chaos, free = compared["chaos"], compared["fault_free"]
  assert abs(chaos["auc"] - free["auc"]) <= 1e-4, compared
  assert free["auc"] > 0.55, compared  # it learnt from the clicks

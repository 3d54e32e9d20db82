"""Jobs inside a real Slurm step: srun on a 2-node Slurm cluster of the rig.

Each node is a rig host (tools/rig/cluster.py) running its own slurmd, with
slurmctld and munged on n1 (tools/rig/slurm.py). The jobs start with srun
from n1 as a user starts them inside an allocation: no TF_CONFIG, hostfile
or ssh; every task works the cluster out from its step's variables. The
rig's teardown ends the daemons with the hosts, whatever the test did.
"""
import json

import pytest

from tests.helpers.processes import ROOT
from tests.helpers.rig import ENV, LAUNCH_ENV, PYTHON, job_processes
from tools.rig import slurm as slurm_lib


@pytest.fixture
def slurm(cluster):
  """A started 2-node Slurm cluster (nodes n1, n2)."""
  return slurm_lib.Slurm(cluster(2, prefix="n")).start()


def _train(slurm, tmp_path, distribution, srun_options=()):
  summary = tmp_path / "summary.json"
  argv = ["srun", "-N2", *srun_options, PYTHON, "-m", "estimator_scale.cli",
          f"--distribution={distribution}", "--model=digits_cnn",
          f"--model_dir={tmp_path / 'model'}", "--train_steps=300",
          f"--summary_json={summary}"]
  proc = slurm.run(argv, cwd=ROOT, env=LAUNCH_ENV, timeout=300)
  assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
  assert "TF_CONFIG" not in LAUNCH_ENV
  with open(summary, encoding="utf-8") as f:
    return json.load(f)


def _tasks_left(slurm):
  """The job's Python processes still alive on any node (daemons aside)."""
  return [cmd for host in slurm.cluster.hosts for cmd in job_processes(host)
          if PYTHON in cmd]


def test_srun_runs_multi_worker_mirrored_from_the_step(slurm, tmp_path):
  result = _train(slurm, tmp_path, "multi_worker_mirrored", ["-n2"])
  assert result["workers"] == 2
  assert result["eval"]["accuracy"] >= 0.9, result
  assert not _tasks_left(slurm)


def test_srun_trains_horovod_without_horovodrun(slurm, tmp_path):
  result = _train(slurm, tmp_path, "horovod", ["-n2"])
  assert result["workers"] == 2
  assert result["eval"]["accuracy"] >= 0.9, result
  assert not _tasks_left(slurm)


ALLREDUCE = ("import tensorflow as tf; "
             "from estimator_scale.backends.horovod import ranks; "
             "hvd = ranks.init_horovod(); "
             "total = hvd.allreduce(tf.constant(hvd.rank() + 1.0), op=hvd.Sum); "
             "print('rank', hvd.rank(), 'of', hvd.size(), 'local', "
             "hvd.local_rank(), 'cross', hvd.cross_rank(), 'sum', "
             "float(total), flush=True)")


def test_srun_makes_horovod_ranks_with_gloo_itself(slurm):
  proc = slurm.run(["srun", "-N2", "-n2", PYTHON, "-c", ALLREDUCE], cwd=ROOT,
                   env=ENV, timeout=120)
  assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
  lines = sorted(line for line in proc.stdout.splitlines()
                 if line.startswith("rank"))
  # One rank per node: each is local rank 0, and the cross ranks are the
  # nodes; the sum over both nodes went through Gloo.
  assert lines == ["rank 0 of 2 local 0 cross 0 sum 3.0",
                   "rank 1 of 2 local 0 cross 1 sum 3.0"], proc.stdout
  assert not _tasks_left(slurm)

"""Jobs inside a real Slurm step: srun on a 2-node Slurm cluster of the rig.

Each node is a rig host (tools/rig/cluster.py) running its own slurmd, with
slurmctld and munged on n1 (tools/rig/slurm.py). The jobs start with srun
from n1 as a user starts them inside an allocation: no TF_CONFIG, hostfile
or ssh; every task works the cluster out from its step's variables. The
rig's teardown ends the daemons with the hosts, whatever the test did.
"""
import json
import os
import re
import time

import pytest

from tests.helpers import waiting
from tests.helpers.checkpoints import checkpoint_step
from tests.helpers.processes import ROOT
from tests.helpers.rig import ENV, LAUNCH_ENV, PYTHON, VENV_BIN, job_processes
from tools.rig import slurm as slurm_lib

LIMIT = 60
"""Seconds from a lost node to the end of the step it ran in."""
STEPS = 1000
"""Updates of the requeued job: a lost node after step 100 leaves most."""


@pytest.fixture
def slurm(cluster):
  """A started 2-node Slurm cluster (nodes n1, n2)."""
  return slurm_lib.Slurm(cluster(2, prefix="n")).start()


def _train(slurm, tmp_path, distribution, srun_options, env):
  summary = tmp_path / "summary.json"
  argv = ["srun", "-N2", *srun_options, PYTHON, "-m", "estimator_scale.cli",
          f"--distribution={distribution}", "--model=digits_cnn",
          f"--model_dir={tmp_path / 'model'}", "--train_steps=300",
          f"--summary_json={summary}"]
  proc = slurm.run(argv, cwd=ROOT, env=env, timeout=300)
  assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
  assert "TF_CONFIG" not in env
  with open(summary, encoding="utf-8") as f:
    return json.load(f)


def _tasks_left(slurm):
  """The job's Python processes still alive on any node (daemons aside)."""
  return [cmd for host in slurm.cluster.hosts for cmd in job_processes(host)
          if PYTHON in cmd]


@pytest.mark.parametrize("distribution,srun_options,env", [
    ("multi_worker_mirrored", ["-n2"], LAUNCH_ENV),
    ("horovod", ["-n2"], LAUNCH_ENV),
    # A parameter server, the chief beside it on n1 (block placement), a
    # worker on n2: two workers train. The step ends because the server
    # ends itself once both have.
    ("parameter_server", ["-n3"], dict(LAUNCH_ENV,
                                       ESTIMATOR_SCALE_PS_TASKS="1")),
])
def test_srun_trains_two_workers_from_the_step(slurm, tmp_path, distribution,
                                               srun_options, env):
  result = _train(slurm, tmp_path, distribution, srun_options, env)
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


def test_a_lost_node_ends_the_step_naming_it_and_the_requeued_job_resumes(
    cluster, tmp_path):
  slurm = slurm_lib.Slurm(cluster(3, prefix="n")).start()
  n2 = slurm.cluster.host("n2")
  model_dir, log = tmp_path / "model", tmp_path / "job.log"
  summary = tmp_path / "summary.json"
  # The documented batch script as a user submits it, the venv activated.
  env = dict(ENV, PATH=f"{VENV_BIN}:{ENV['PATH']}", MODEL_DIR=str(model_dir))
  submitted = slurm.run(
      ["sbatch", "--parsable", f"--output={log}",
       os.path.join(ROOT, "tools/deploy/slurm/horovod.sbatch"),
       "--model=digits_cnn", f"--train_steps={STEPS}",
       "--save_checkpoints_steps=100", "--verbosity=1",
       f"--summary_json={summary}"], cwd=ROOT, env=env)
  assert submitted.returncode == 0, submitted.stderr
  job = submitted.stdout.strip().split(";")[0]
  waiting.wait_for(lambda: checkpoint_step(model_dir) >= 100,
                   "a checkpoint of step 100", time.monotonic() + 240,
                   log=log, poll=0.5)
  assert slurm.job(job)["NodeList"] == "n[1-2]"
  n2.kill_all()  # its slurmd and rank 1: the node is gone
  deadline = time.monotonic() + LIMIT
  waiting.wait_for(lambda: slurm.job(job)["Restarts"] == "1",
                   "the step's end and the job's requeue", deadline, log=log,
                   poll=0.5)
  waiting.wait_for(lambda: slurm.job(job)["JobState"] in (
      "COMPLETED", "FAILED"), "the requeued job's end",
                   time.monotonic() + 240, log=log, poll=0.5)
  text = log.read_text(errors="replace")
  info = slurm.job(job)
  assert info["JobState"] == "COMPLETED", text[-4000:]
  # The nodes Slurm gave the requeued job: n2 is DOWN.
  assert info["NodeList"] == "n[1,3]", info
  named = [l for l in text.splitlines() if "estimator-scale: error:" in l]
  assert len(named) == 1, text[-4000:]
  assert named[0].startswith(
      "estimator-scale: error: Horovod rank 0 on n1 lost rank 1 on n2 (its "
      "process is gone), so every rank stops"), named
  # The first run started fresh; the requeued one from the first's last
  # checkpoint (later restores: the evaluation's, of the final one), and
  # trained to the end on both ranks.
  restored = re.findall(r"Restoring parameters from \S*model\.ckpt-(\d+)",
                        text)
  assert 100 <= int(restored[0]) < STEPS, restored
  assert set(restored[1:]) == {str(STEPS)}, restored
  result = json.loads(summary.read_text())
  assert (result["workers"], result["global_step"]) == (2, STEPS), result
  assert not _tasks_left(slurm)

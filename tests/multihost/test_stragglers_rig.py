"""The slow host named on the rig: one of 2 Slurm nodes held to a tenth of a
CPU while a Horovod job (srun, one rank per node) trains, and the chief's
straggler lines name that node's rank."""
import os
import re
import subprocess
import time

from tests.helpers import waiting
from tests.helpers.processes import ROOT
from tests.helpers.rig import LAUNCH_ENV, PYTHON
from tools.rig import slurm as slurm_lib

LINE = re.compile(r"stragglers: compute per update, steps \d+-\d+: (.*)")
LIMIT = 300
"""Seconds the whole job may take."""


def test_the_chief_names_the_node_held_to_a_tenth_of_a_cpu(cluster,
                                                            tmp_path):
  slurm = slurm_lib.Slurm(cluster(2, prefix="n")).start()
  n2 = slurm.cluster.host("n2")
  model_dir = tmp_path / "model"
  proc = slurm.popen(
      ["timeout", str(LIMIT), "srun", "-N2", "-n2", PYTHON, "-m",
       "estimator_scale.cli", "--distribution=horovod", "--model=digits_cnn",
       f"--model_dir={model_dir}", "--train_steps=120",
       "--log_every_n_steps=50", "--eval_steps=1"],
      cwd=ROOT, env=LAUNCH_ENV, stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True)
  # Slowed once training starts (rank 0 writes the step-0 checkpoint), so
  # that n2 does not import TensorFlow and build the graph at that pace.
  waiting.wait_for(lambda: os.path.exists(model_dir / "checkpoint"),
                   "training's start", time.monotonic() + LIMIT, proc=proc,
                   poll=0.1)
  n2.limit_cpu(0.1)
  log, lines = [], []
  for line in proc.stdout:
    log.append(line)
    if LINE.search(line):
      lines.append(LINE.search(line).group(1))
      if len(lines) == 3:  # the whole run's: evaluate at full speed
        n2.limit_cpu(None)
  assert proc.wait() == 0, "".join(log)[-4000:]
  # Every 50 updates, then the whole run.
  assert len(lines) == 3, "".join(log)[-4000:]
  for text in lines:
    figures, _, named = text.partition("slow (above 1.25x the median): ")
    assert "rank 0 (n1) " in figures and "rank 1 (n2) " in figures, text
    assert named.startswith("rank 1 (n2) at ") and "n1" not in named, text

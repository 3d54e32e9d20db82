"""Every example once per epoch while the rig's hosts come and go.

Two jobs train a tiny model on examples that carry their id (one pass of
the data is EXAMPLES ids), each worker recording the ids of every update as
it trains (`trained_ids`): an elastic Horovod job that goes 2 -> 3 -> 2
ranks (a host joins through the discovery script, then one is killed), and
an `estimator-scale-launch --max_restarts` job of two multi_worker_mirrored
workers that loses one. Counted from every worker, each id of the epoch is
trained once, except that the updates after the last commit (checkpoint)
before a kill are trained again after the restart, and so are their
examples, once: the rest of the epoch from the commit on is the same
sequence on any number of workers.
"""
import subprocess
import time

from tests.helpers import trained_ids
from tests.helpers import waiting
from tests.helpers.checkpoints import checkpoint_step
from tests.helpers.processes import ROOT
from tests.helpers.rig import (ENV, HOROVODRUN_GLOO, LAUNCH_ENV, PYTHON,
                               discovery, finish)

EXAMPLES = 640
COMMIT = 10
# Global batch 8 on 2 workers: at least an epoch whatever the changes.
WORKER = [PYTHON, "-m", "tests.workers.position_run",
          f"--examples={EXAMPLES}", "--global_batch_size=8",
          f"--max_steps={EXAMPLES // 8}", "--seconds_per_update=0.1"]


def _steps_on(out, size):
  return [r["step"] for r in trained_ids.read(out) if r["size"] == size]


def test_elastic_horovod_2_3_2_trains_each_example_once(cluster, tmp_path):
  host1, host2, _ = cluster(3, loopback_hostname=True).hosts
  out, model_dir, log = tmp_path / "ids", tmp_path / "model", tmp_path / "log"
  hosts, discover = discovery(tmp_path, "host1", "host2")
  argv = [*HOROVODRUN_GLOO, "-np", "2", "--min-np", "2", "--max-np", "3",
          "--host-discovery-script", str(discover), *WORKER,
          "--distribution=horovod", "--elastic",
          f"--commit_every_n_steps={COMMIT}", f"--model_dir={model_dir}",
          f"--out_dir={out}", "--run=elastic"]
  deadline = time.monotonic() + 300
  with open(log, "w") as f:
    proc = host1.popen(argv, cwd=ROOT, env=ENV, stdout=f,
                       stderr=subprocess.STDOUT)
  try:
    waiting.wait_for(lambda: checkpoint_step(model_dir) >= COMMIT,
                     f"a commit at step {COMMIT}", deadline, proc=proc, log=log)
    hosts.write_text("host1:1\nhost2:1\nhost3:1\n")
    # A commit on 3 ranks, then a few updates it will lose.
    waiting.wait_for(lambda: any(
        s % COMMIT == 3 and s > min(_steps_on(out, 3)) + COMMIT
        for s in _steps_on(out, 3)),
                     "updates on 3 ranks", deadline, proc=proc, log=log)
    host2.kill_all()
    hosts.write_text("host1:1\nhost3:1\n")
  finally:
    finish(proc, log, deadline)
  records = trained_ids.read(out)
  (joined, killed) = trained_ids.check_each_once(records, EXAMPLES)
  assert [joined[1], killed[1]] == [2, 3], (joined, killed)
  assert joined[3] == []  # the ranks left right after a commit: none lost
  start, _, resumed, lost = killed
  last = max(r["step"] for r in records if r["size"] == 3)
  # The last commit before the kill, and the updates after it, trained again.
  assert resumed == start + (last - start) // COMMIT * COMMIT, (resumed, last)
  assert 0 < len(lost) <= (last - resumed) * 12, (len(lost), last, resumed)


def test_launch_max_restarts_losing_a_host_trains_each_example_once(
    cluster, tmp_path):
  host1, host2 = cluster(2, loopback_hostname=True).hosts
  out, model_dir, log = tmp_path / "ids", tmp_path / "model", tmp_path / "log"
  argv = [PYTHON, "-m", "estimator_scale.launcher", "--hosts", "host1,host2",
          "--min_workers", "1", "--max_restarts", "1", "--", *WORKER,
          "--distribution=multi_worker_mirrored",
          f"--save_checkpoints_steps={COMMIT}", f"--model_dir={model_dir}",
          f"--out_dir={out}", "--run=launch"]
  deadline = time.monotonic() + 300
  with open(log, "w") as f:
    proc = host1.popen(argv, cwd=ROOT, env=LAUNCH_ENV, stdout=f,
                       stderr=subprocess.STDOUT)
  try:
    waiting.wait_for(lambda: any(
        s % COMMIT == 3 and s > COMMIT for s in _steps_on(out, 2)),
                     "updates after a checkpoint", deadline, proc=proc, log=log)
    host2.kill_all()
  finally:
    finish(proc, log, deadline)
  assert "lost host host2" in log.read_text(), log.read_text()[-5000:]
  records = trained_ids.read(out)
  [(start, size, resumed, lost)] = trained_ids.check_each_once(records,
                                                               EXAMPLES)
  last = max(r["step"] for r in records if r["size"] == 2)
  assert (start, size) == (0, 2)
  assert resumed == last // COMMIT * COMMIT, (resumed, last)
  assert 0 < len(lost) <= (last - resumed) * 8, (len(lost), last, resumed)

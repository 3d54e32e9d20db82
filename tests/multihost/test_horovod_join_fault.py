"""A rank lost while it joins an elastic Horovod job: the job goes on.

The job trains on host1 and host2 under horovodrun's elastic driver; host3
is listed, and its rank, as soon as its process exists (long before it can
reach Horovod's Gloo rendezvous, where the other two wait for it), is
killed, or stopped past the rendezvous timeout as a rank slow to start on a
busy host would be. The others' wait runs out
(HOROVOD_GLOO_TIMEOUT_SECONDS); unpatched, Horovod's background thread
aborts on both then, and horovodrun stops the job, every rank of the round
having failed. With third_party/horovod's lost_peer_at_init.patch their
hvd.init() fails instead and they ask the driver for their slots again: it
forms the ranks without a killed host3 (blacklisted), or, once the stopped
one has started and failed its own late hvd.init() (its round is gone) and
asked again too, with it. Either way the job ends with exit 0 and each
example trained once.
"""
import os
import signal
import subprocess
import time

import pytest

from tests.helpers import trained_ids
from tests.helpers import waiting
from tests.helpers.checkpoints import checkpoint_step
from tests.helpers.processes import ROOT
from tests.helpers.rig import ENV, HOROVODRUN_GLOO, PYTHON, discovery, finish

EXAMPLES = 480
COMMIT = 10
WORKER = [PYTHON, "-m", "tests.workers.position_run"]
GLOO_TIMEOUT = 15
"""Short, so the test waits little for the rank that never comes; long
enough for the two first ranks, started together, to meet on a busy
machine."""


def _worker_pids(host):
  """`host`'s processes running WORKER (not the shells ssh starts it in)."""
  pids = []
  for pid in host.pids():
    try:
      with open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = f.read().decode(errors="replace").split("\0")
    except (FileNotFoundError, ProcessLookupError):  # gone meanwhile
      continue
    if argv[:len(WORKER)] == WORKER:
      pids.append(pid)
  return pids


@pytest.mark.parametrize("fault,sizes", [("kill", {2}), ("stall", {2, 3})])
def test_a_rank_lost_while_it_joins_leaves_the_job_training(cluster, tmp_path,
                                                            fault, sizes):
  host1, _, host3 = cluster(3, loopback_hostname=True).hosts
  out, model_dir, log = tmp_path / "ids", tmp_path / "model", tmp_path / "log"
  hosts, discover = discovery(tmp_path, "host1", "host2")
  argv = [*HOROVODRUN_GLOO, "-np", "2", "--min-np", "2", "--max-np", "3",
          "--host-discovery-script", str(discover), *WORKER,
          f"--examples={EXAMPLES}", "--global_batch_size=8",
          f"--max_steps={EXAMPLES // 8}", "--seconds_per_update=0.1",
          "--distribution=horovod", "--elastic",
          f"--commit_every_n_steps={COMMIT}", f"--model_dir={model_dir}",
          f"--out_dir={out}", "--run=join"]
  deadline = time.monotonic() + 240
  with open(log, "w") as f:
    proc = host1.popen(
        argv, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
        env=dict(ENV, HOROVOD_GLOO_TIMEOUT_SECONDS=str(GLOO_TIMEOUT)))
  try:
    waiting.wait_for(lambda: checkpoint_step(model_dir) >= COMMIT,
                     f"a commit at step {COMMIT}", deadline, proc=proc, log=log)
    hosts.write_text("host1:1\nhost2:1\nhost3:1\n")
    # Polled often: the fault must strike while the rank joins.
    joining = waiting.wait_for(lambda: _worker_pids(host3), "host3's rank",
                               deadline, proc=proc, log=log, poll=0.05)
    if fault == "kill":
      for pid in joining:
        os.kill(pid, signal.SIGKILL)
    else:
      for pid in joining:
        os.kill(pid, signal.SIGSTOP)
      time.sleep(GLOO_TIMEOUT + 5)
      for pid in joining:
        os.kill(pid, signal.SIGCONT)
  finally:
    text = finish(proc, log, deadline)
  assert "terminate called" not in text, text[-5000:]
  assert "a peer did not reach the Gloo rendezvous" in text, text[-5000:]
  records = trained_ids.read(out)
  sessions = trained_ids.check_each_once(records, EXAMPLES)
  # Killed, host3 never trained; stalled, it joined at the second try. The
  # ranks left for the join right after a commit, losing no update.
  assert {r["size"] for r in records} == sizes, sessions
  assert sessions and all(lost == [] for *_, lost in sessions), sessions

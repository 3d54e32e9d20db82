"""Chaos for an elastic Horovod job: hosts die, drop off the network, stall,
slow down, join and come back.

host1 runs horovodrun's driver and is never faulted (its loss ends any
horovodrun job: a scheduler's requeue is the Slurm rig's business).
"""
import pathlib
import subprocess
import time

from tests.helpers.processes import ROOT
from estimator_scale import moments
from tests.helpers.rig import ENV, HOROVODRUN, discovery
from tools.rig import cluster as cluster_lib
from tools.rig.chaos import core

KINDS = ("kill_rank", "kill_host", "link_down", "pause", "slow", "join",
         "disk_full")
"""kill_rank: SIGKILL a rank (horovodrun blacklists its host for the
cooldown); kill_host: every process of a host, sshd too, then the discovery
drops it until it is brought back; link_down: its cable pulled past the
collective timeout, dropped from discovery meanwhile; pause: SIGSTOP a rank
past the collective timeout, then SIGCONT; slow: a host capped at a fifth of
a core for a while; join: a spare host listed by the discovery;
disk_full: the model_dir's disk (`core.small_disk`) filled for a while, so
that rank 0's commits fail. Opt-in (`core.OPT_IN`): oom, the OOM killer
taking the biggest process of a host but host1 (its rank)."""

RESTARTS = ("kill_rank", "kill_host", "link_down", "pause", "oom")
"""The kinds after which the job must start a new session to go on."""

COLLECTIVE_TIMEOUT = 30
"""HOROVOD_GLOO_TIMEOUT_SECONDS of the job: how long ranks wait for a
stalled or cut-off peer, and for a rank started after a fault to reach the
rendezvous. Horovod's own default: recovery waits for it, often more than
once, so a longer one slows every recovery. A rank that misses the
rendezvous (killed while it joins, or slower than the timeout to start on a
busy host) is left out of that round and its host blacklisted
(third_party/horovod/lost_peer_at_init.patch)."""

PER_RANK_BATCH = 2

HELD_MICRO_BATCHES = 60
"""The click job's update: 60 micro-batches of PER_RANK_BATCH, which 2, 3,
4 and 5 ranks share evenly (`elastic_batch="hold"`), so that it trains what
one process would at that global batch and has a fault-free run to equal;
the MLP's global batch follows its ranks (`"scale"`)."""


class Chaos(core.Driver):
  """Drives faults into one elastic Horovod job on `cluster`'s hosts."""

  restarts = RESTARTS

  def __init__(self, cluster, work_dir, seed, start_hosts=4,
               gap=(60.0, 180.0), kinds=KINDS, log=print, case="mlp"):
    super().__init__(cluster, work_dir, seed, gap, kinds, log, case)
    if case == "click":
      self.global_batch = PER_RANK_BATCH * HELD_MICRO_BATCHES
      # Its tables' parts are merged at each save and re-sharded when the
      # ranks change.
      self.moments = moments.MOMENTS
    names = self.names()
    self.active = names[:start_hosts]  # what the discovery script lists
    self.spare = names[start_hosts:]  # healthy hosts outside the job
    self._hosts_file = None

  # -- the job ------------------------------------------------------------------

  def start(self):
    self._hosts_file, discover = discovery(
        pathlib.Path(self.work_dir), *self.active)
    argv = [HOROVODRUN, "--gloo", "-np", str(len(self.active)),
            "--min-np", "2", "--max-np", str(len(self.hosts)),
            "--blacklist-cooldown-range", "10", "20", "--start-timeout", "180",
            "--host-discovery-script", str(discover),
            *core.WORKER, "--elastic", f"--case={self.case}",
            "--distribution=horovod", f"--examples={self.examples}",
            *self._batch_flags(),
            "--max_steps=100000000", "--seconds_per_update=0.05",
            f"--commit_every_n_steps={core.COMMIT}",
            f"--stop_at_file={self._stop_file}",
            f"--model_dir={self.model_dir}", f"--out_dir={self.out}",
            f"--moments_dir={self.moments_dir}", "--run=chaos"]
    env = dict(ENV, HOROVOD_GLOO_TIMEOUT_SECONDS=str(COLLECTIVE_TIMEOUT))
    with open(self.job_log, "w") as f:
      self._job = self.hosts["host1"].popen(
          argv, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
    self._t0 = time.monotonic()
    self._wait(lambda: self._updates_since(0), 240, "the job's first update")

  def _batch_flags(self):
    if self.global_batch is None:
      return [f"--global_batch_size={PER_RANK_BATCH * len(self.active)}"]
    return [f"--global_batch_size={self.global_batch}",
            "--elastic_batch=hold",
            f"--accumulation_steps={HELD_MICRO_BATCHES // len(self.active)}"]

  def stop(self, timeout=120):
    """Ends the job at a step a few commits ahead, which every rank reads
    before it gets there, so that all stop after the same update as at the
    end of training (a SIGTERM would end it too, but as a run stopped
    before its end, exit 143). Returns its exit code."""
    target = self._stop_later()
    try:
      return self._job.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
      self._job.kill()
      raise cluster_lib.ClusterError(
          f"the job did not end within {timeout} s of step {target}; see "
          f"{self.job_log}") from None

  # -- the faults ---------------------------------------------------------------

  def _kinds_now(self):
    """The job keeps two ranks at least (horovodrun's --min-np) and host1
    (the driver); where none of the kinds asked for is allowed, a spare
    joins (there is always one then: every host the faults took out came
    back as one). Hosts are counted as the discovery lists them: one whose
    rank was killed and is blacklisted for the cooldown counts, so a draw
    may leave a single rank running until it is back (the suite's seeds
    are drawn this way)."""
    faultable = self._hosts_for("kill_rank")
    return [k for k in self.kinds if
            (k == "join" and self.spare) or
            (k == "slow" and self.active) or
            (k not in ("join", "slow") and faultable and
             len(self.active) > 2)] or ["join"]

  def _hosts_for(self, kind):
    if kind == "join":
      return sorted(self.spare)
    return sorted(h for h in self.active if kind == "slow" or h != "host1")

  def _lead_in(self, moment, kind):
    """A re-shard comes when the ranks change: a spare joins first (a
    fault of its own, whose recovery is the next one's), unless the fault
    is itself a join."""
    if moment != "reshard":
      return True
    if kind == "join" or not self.spare:
      return False
    join = self._join(sorted(self.spare)[0])
    join.note = "re-shard held for the next fault"
    self.faults.append(join)
    return True

  def _kill_rank(self, host):
    return self._kill("kill_rank", host, self._worker_pids(host))

  def _kill_host(self, host):
    fault = self._fault("kill_host", host)
    self.hosts[host].kill_all()
    self._list(without=host)
    return fault

  def _link_down(self, host):
    fault = self._fault("link_down", host, COLLECTIVE_TIMEOUT)
    self.hosts[host].set_link(False)
    self._list(without=host)
    time.sleep(2 * COLLECTIVE_TIMEOUT)
    self.hosts[host].set_link(True)
    fault.ended = self.now()
    return fault

  def _pause(self, host):
    return self._stop_for(host, self._worker_pids(host), COLLECTIVE_TIMEOUT)

  def _disk_full(self, host):
    del host  # the disk is rank 0's, which commits: host1's
    return self._fill_disk("host1")

  def _join(self, host):
    fault = self._fault("join", host)
    self.spare.remove(host)
    self.active.append(host)
    self._write_hosts()
    return fault

  def _bring_back(self, fault):
    self._undo(fault)
    self.spare.append(fault.host)
    self.log(f"chaos {fault.ended:7.1f} s: {fault.host} back, a spare")

  # -- what the job shows -------------------------------------------------------

  def _list(self, without):
    self.active.remove(without)
    self._write_hosts()

  def _write_hosts(self):
    self._hosts_file.write_text("".join(f"{h}:1\n" for h in self.active))

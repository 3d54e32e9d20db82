"""Chaos for a batch job under Slurm's requeue: the nodes of a Horovod job
started by srun are killed or set DOWN, Slurm requeues the job, and it
resumes from its last checkpoint on the nodes left.

The first host runs slurmctld and munged and is never faulted or given to
the job (its loss ends Slurm itself); the job takes two of the other nodes, and a node
a fault took out is brought back before the next, a spare for the requeue
after it.
"""
import os
import time

from tests.helpers.processes import ROOT
from tests.helpers.rig import ENV, VENV_BIN
from tools.rig import cluster as cluster_lib
from tools.rig import slurm as slurm_lib
from tools.rig.chaos import core

KINDS = ("kill_node", "down_node", "link_down", "slow", "kill_rank", "pause",
         "disk_full")
"""kill_node: every process of a node the job runs on (its slurmd too),
which Slurm sets DOWN once SlurmdTimeout passes; down_node: `scontrol
update State=DOWN` on one; link_down: a node's cable pulled for LINK_DOWN
seconds, past SlurmdTimeout and Horovod's timeout; slow: a node capped at a
fifth of a core for a while; kill_rank: SIGKILL the job's rank on a node
that stays up; pause: SIGSTOP it past the collective timeout, then SIGCONT;
disk_full: the model_dir's disk (`core.small_disk`) filled for a while. Each
lost node comes back (its slurmd started, `State=RESUME`, its link plugged
in); the last three fail the step with every node up, which the batch
script runs again. Opt-in (`core.OPT_IN`): oom, the OOM killer taking the
biggest process of a node of the job (its rank), which fails the step as
kill_rank does."""

RESTARTS = ("kill_node", "down_node", "link_down", "kill_rank", "pause",
            "oom")

LINK_DOWN = 40

COLLECTIVE_TIMEOUT = 30
"""HOROVOD_GLOO_TIMEOUT_SECONDS of the job's ranks (see horovod.py's)."""

GLOBAL_BATCH = 4

SCRIPT = os.path.join(ROOT, "tools", "deploy", "slurm", "horovod.sbatch")
"""The batch script users submit: the chaos job runs it, its retries and
its wait for the requeue as shipped, with the test worker for the CLI."""

_CLI = "python -m estimator_scale.cli"


def batch_script(worker_argv):
  """SCRIPT's text with `worker_argv` where it starts the CLI (the script
  passes its own --distribution and --model_dir after it, which the worker
  takes too)."""
  with open(SCRIPT, encoding="utf-8") as f:
    text = f.read()
  if text.count(_CLI) != 1:
    raise cluster_lib.ClusterError(
        f"{SCRIPT} must start `{_CLI}` once, where the chaos job puts its "
        "worker")
  return text.replace(_CLI, " ".join(worker_argv))


class SlurmChaos(core.Driver):
  """Drives faults into one requeueable Slurm batch job on `cluster`'s
  hosts, Slurm started here."""

  restarts = RESTARTS
  global_batch = GLOBAL_BATCH

  def __init__(self, cluster, work_dir, seed, gap=(60.0, 180.0), kinds=KINDS,
               log=print, case="mlp"):
    super().__init__(cluster, work_dir, seed, gap, kinds, log, case)
    if case == "click":  # its tables' parts are merged at each save
      self.moments = ("save", "merge")
    self.slurm = slurm_lib.Slurm(cluster).start()
    self._id = None

  # -- the job ------------------------------------------------------------------

  def start(self):
    script = os.path.join(self.work_dir, "job.sbatch")
    with open(script, "w", encoding="utf-8") as f:
      f.write(batch_script(self._worker_argv(GLOBAL_BATCH)))
    env = dict(ENV, PATH=f"{VENV_BIN}:{ENV['PATH']}", MODEL_DIR=self.model_dir,
               HOROVOD_GLOO_TIMEOUT_SECONDS=str(COLLECTIVE_TIMEOUT))
    submitted = self.slurm.run(
        ["sbatch", "--parsable", f"--output={self.job_log}",
         f"--exclude={self.slurm.controller.name}", script],
        cwd=ROOT, env=env)
    if submitted.returncode != 0:
      raise cluster_lib.ClusterError(f"sbatch: {submitted.stderr.strip()}")
    self._id = submitted.stdout.strip().split(";")[0]
    self._job = _SlurmJob(self.slurm, self._id)
    self._t0 = time.monotonic()
    self._wait(lambda: self._updates_since(0), 300, "the job's first update")

  def stop(self, timeout=240):
    """Ends the job at a step a few commits ahead (see ps.PsChaos.stop);
    returns 0 where Slurm says it COMPLETED, else 1."""
    target = self._stop_later()
    deadline = time.monotonic() + timeout
    while self._job.poll() is None and time.monotonic() < deadline:
      time.sleep(1)
    if self._job.poll() is None:
      self._job.kill()
      raise cluster_lib.ClusterError(
          f"the job did not end within {timeout} s of step {target}; see "
          f"{self.job_log}")
    return self._job.returncode

  # -- the faults ---------------------------------------------------------------

  def _nodes(self):
    """The nodes the job runs on now."""
    proc = self.slurm.run(["scontrol", "show", "hostnames",
                           self.slurm.job(self._id)["NodeList"]])
    return sorted(proc.stdout.split())

  def _hosts_for(self, kind):
    """The job's nodes; a cut spares the batch host, whose requeued job
    Slurm holds (many-hosts.md#chaos)."""
    nodes = self._nodes()
    if kind == "link_down":
      batch = self.slurm.job(self._id).get("BatchHost")
      nodes = [n for n in nodes if n != batch] or nodes
    return nodes

  def _kill_node(self, host):
    fault = self._fault("kill_node", host)
    self.hosts[host].kill_all()
    return fault

  def _down_node(self, host):
    fault = self._fault("down_node", host)
    self.slurm.run(["scontrol", "update", f"NodeName={host}", "State=DOWN",
                    "Reason=chaos"])
    return fault

  def _link_down(self, host):
    fault = self._fault("link_down", host)
    self.hosts[host].set_link(False)
    time.sleep(LINK_DOWN)
    self.hosts[host].set_link(True)
    fault.ended = self.now()
    return fault

  def _kill_rank(self, host):
    return self._kill("kill_rank", host, self._worker_pids(host))

  def _pause(self, host):
    return self._stop_for(host, self._worker_pids(host), COLLECTIVE_TIMEOUT)

  def _disk_full(self, host):
    del host  # every node's model_dir (one tmpfs); recorded on rank 0's
    return self._fill_disk(self.slurm.job(self._id).get("BatchHost"))

  def _absorb(self, fault, new_session=None):
    super()._absorb(fault, new_session)  # brings a cut node back itself
    if fault.kind in ("kill_node", "down_node"):
      self._bring_back(fault)

  def _bring_back(self, fault):
    host = self.hosts[fault.host]
    if fault.kind == "kill_node":
      host.start_sshd()
      self.slurm._daemon(  # pylint: disable=protected-access
          host, f"slurmd-{host.name}", [f"{slurm_lib.SBIN}/slurmd", "-D"])
    elif fault.kind == "down_node":
      self.slurm.run(["scontrol", "update", f"NodeName={host.name}",
                      "State=RESUME"])
    if fault.kind != "link_down":  # ended when its link came back
      fault.ended = self.now()
    self.log(f"chaos {fault.ended:7.1f} s: {fault.host} back")


  def check(self, records):
    return core.check_sync(records, GLOBAL_BATCH, self.examples)

  def epochs(self, records):
    return core.sync_epochs(records, GLOBAL_BATCH, self.examples)

  def left(self, host):
    """What of the job still runs on `host`: not Slurm's daemons, which
    the rig stops with its hosts (a step's slurmstepd is the job's)."""
    return [c for c in super().left(host)
            if not c.startswith((slurm_lib.SBIN + "/", "slurmctld:"))]


class _SlurmJob:
  """A Slurm job seen as a process: `poll()` is None while it runs or
  waits to run again, then 0 where it COMPLETED and 1 otherwise."""

  def __init__(self, slurm, job_id):
    self._slurm, self._id = slurm, job_id
    self.returncode = None

  def poll(self):
    if self.returncode is None:
      state = self._slurm.job(self._id)["JobState"]
      if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT",
                   "NODE_FAIL", "OUT_OF_MEMORY"):
        self.returncode = 0 if state == "COMPLETED" else 1
    return self.returncode

  def kill(self):
    self._slurm.run(["scancel", self._id])

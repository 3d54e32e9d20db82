"""Chaos for a parameter-server job under `estimator-scale-launch
--max_restarts`: a training task killed, a host killed whole or cut off,
a task stopped past the timeout, a host slowed, and the lost hosts back.

The launcher runs on host1, which is never faulted (its loss ends the job:
a scheduler's requeue is the Slurm rig's business); the job's hosts are the
others, the first of them holding the chief and the ps task. Every failure
stops the whole cluster, and the launcher starts it again from the last
checkpoint on the hosts that answer; a host that answers again joins at the
next checkpoint (the `join` this driver records after bringing one back).
"""
import collections
import json
import signal
import subprocess
import time

from tests.helpers.processes import ROOT
from tests.helpers.rig import LAUNCH_ENV, PYTHON
from tools.rig import cluster as cluster_lib
from tools.rig.chaos import core

KINDS = ("kill_task", "kill_host", "link_down", "pause", "slow", "disk_full")
"""kill_task: SIGKILL a host's training task (the chief or a worker);
kill_host: every process of a host, sshd too, brought back once the job
goes on without it; link_down: its cable pulled past the timeouts;
pause: SIGSTOP a training task past the timeout, then SIGCONT; slow: a
host capped at a fifth of a core for a while; disk_full: the model_dir's
disk (`core.small_disk`) filled for a while, recorded on the chief's host,
whose saves fail. A host brought back joins (`join`). Opt-in
(`core.OPT_IN`): oom, the OOM killer taking a host's biggest process (a
training or ps task)."""

COLLECTIVE_TIMEOUT = 30
"""ESTIMATOR_SCALE_COLLECTIVE_TIMEOUT of the job: how long a synchronous
task waits for the others' gradients or the chief's apply."""

LINK_DOWN = 40
"""Seconds a cut link stays down: past the launcher's ssh keep-alive (15 s)
and the collective timeout."""

GLOBAL_BATCH = 6
"""Divides over 3, 2 and 1 training tasks, as hosts go and come."""


class PsChaos(core.Driver):
  """Drives faults into one parameter-server job of `cluster`'s hosts but
  host1; `sync`: `--ps_sync`."""

  global_batch = GLOBAL_BATCH

  def __init__(self, cluster, work_dir, seed, sync=True, gap=(60.0, 180.0),
               kinds=KINDS, log=print, case="mlp"):
    super().__init__(cluster, work_dir, seed, gap, kinds, log, case)
    self.sync = sync
    self.restarts = ("kill_task", "kill_host", "link_down", "oom") + (
        ("pause",) if sync else ())
    self.members = self.names()[1:]  # the hosts the launcher runs tasks on
    self.active = list(self.members)  # those it runs them on now

  # -- the job ------------------------------------------------------------------

  def start(self):
    argv = [PYTHON, "-m", "estimator_scale.launcher",
            "--hosts", ",".join(self.members), "--ps", "1",
            "--min_workers", "1", "--max_restarts", "1000",
            "--probe_every", "5", "--",
            *self._worker_argv(GLOBAL_BATCH),
            "--distribution=parameter_server",
            *(["--ps_sync"] if self.sync else [])]
    env = dict(LAUNCH_ENV,
               ESTIMATOR_SCALE_COLLECTIVE_TIMEOUT=str(COLLECTIVE_TIMEOUT))
    with open(self.job_log, "w") as f:
      self._job = self.hosts["host1"].popen(
          argv, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
    self._t0 = time.monotonic()
    self._wait(lambda: self._updates_since(0), 300, "the job's first update")

  def stop(self, timeout=240):
    """Ends the job at a step a few commits ahead, which every task reads
    before it gets there, so that all stop after the same update and the
    launcher exits 0 as when training ends. Returns its exit code."""
    target = self._stop_later()
    try:
      return self._job.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
      self._job.send_signal(signal.SIGTERM)
      try:
        self._job.wait(timeout=60)
      except subprocess.TimeoutExpired:
        self._job.kill()
      raise cluster_lib.ClusterError(
          f"the job did not end within {timeout} s of step {target}; see "
          f"{self.job_log}") from None

  # -- the faults ---------------------------------------------------------------

  def _kinds_now(self):
    """A host goes out only while three are in (every lost host is back
    before the next fault)."""
    return [k for k in self.kinds if
            k not in ("kill_host", "link_down") or len(self.active) > 2]

  def _hosts_for(self, kind):
    del kind
    return sorted(self.active)

  def _kill_task(self, host):
    return self._kill("kill_task", host, self._training_pids(host))

  def _kill_host(self, host):
    fault = self._fault("kill_host", host)
    self.hosts[host].kill_all()
    self.active.remove(host)
    return fault

  def _link_down(self, host):
    fault = self._fault("link_down", host, COLLECTIVE_TIMEOUT)
    self.hosts[host].set_link(False)
    self.active.remove(host)
    time.sleep(LINK_DOWN)
    self.hosts[host].set_link(True)
    fault.ended = self.now()
    return fault

  def _pause(self, host):
    return self._stop_for(host, self._training_pids(host), COLLECTIVE_TIMEOUT)

  def _disk_full(self, host):
    del host  # the disk is the chief's, wherever the chief runs
    return self._fill_disk(next(h for h in self.members if h in self.active))

  def _bring_back(self, fault):
    """Brings the host back and waits for the launcher to take it again:
    a `join`, measured from the moment it answers ssh (a cut host's link
    is back already: the launcher may take it before its old tasks end)."""
    if fault.kind == "kill_host":
      self._undo(fault)
    self.log(f"chaos {fault.ended:7.1f} s: {fault.host} back")
    join = core.Fault("join", fault.host, fault.ended, fault.ended)
    self.log(f"chaos {join.began:7.1f} s: join {fault.host}")
    self.faults.append(join)
    self.active.append(fault.host)
    join.recovery = self._wait(
        lambda: self._updates_since(join.began, new_session=True,
                                    size=len(self.active)),
        4 * core.ABSORB_LIMIT, f"the launcher taking {fault.host} back"
    ) - join.began
    self.log(f"chaos {self.now():7.1f} s: join {fault.host} absorbed "
             f"{join.recovery:.1f} s after it answered")

  # -- what the job shows -------------------------------------------------------

  def _training_pids(self, host):
    """The host's chief or worker task (not its ps task)."""
    pids = []
    for pid in self._worker_pids(host):
      try:
        with open(f"/proc/{pid}/environ", "rb") as f:
          environ = dict(v.split("=", 1) for v in
                         f.read().decode(errors="replace").split("\0")
                         if "=" in v)
        task = json.loads(environ.get("TF_CONFIG", "{}")).get("task", {})
      except (FileNotFoundError, ProcessLookupError, ValueError):
        continue
      if task.get("type") in ("chief", "worker"):
        pids.append(pid)
    return pids

  def _updates_since(self, since, new_session=False, size=None):
    """As the base class's; with `size`, of a session of that many
    training tasks."""
    if size is None:
      return super()._updates_since(since, new_session)
    t0 = time.time() - self.now()
    times = [r["time"] - t0 for r in self._records()
             if r["time"] - t0 > since and r["began"] - t0 > since and
             r["size"] == size]
    return min(times) if times else None

  # -- the verdict --------------------------------------------------------------

  def check(self, records):
    """Synchronous: each example once an epoch over the restarts, the
    updates a checkpoint holds and a task did not log counted as trained
    (`core.check_sync`). Asynchronous: what the framework claims there, that within
    a session each worker trains its own shard of the examples (every
    size-th, from its index), each pass over it each example once; across
    a restart each worker starts its new shard over, so examples are
    trained again or skipped, which is counted, not checked."""
    if self.sync:
      return core.check_sync(records, GLOBAL_BATCH, self.examples)
    sessions = collections.defaultdict(list)
    for r in records:
      sessions[(r["start"], r["size"], r["began"], r["worker"])].append(r)
    for (start, size, _, worker), rs in sorted(sessions.items()):
      ids = [i for r in sorted(rs, key=lambda r: r["time"]) for i in r["ids"]]
      shard = sorted(range(worker, self.examples, size))
      for begin in range(0, len(ids), len(shard)):
        part = ids[begin:begin + len(shard)]
        if (not set(part) <= set(shard) or len(set(part)) != len(part) or
            (len(part) == len(shard) and sorted(part) != shard)):
          return None, (f"session from step {start} of {size} workers: "
                        f"worker {worker}'s pass from its example {begin} "
                        f"is not its shard once: {part[:40]}")
    return self.restart_lines(), None

  def restart_lines(self):
    """The launcher's restarts, as its log names them."""
    with open(self.job_log, encoding="utf-8", errors="replace") as f:
      return sum(line.startswith("[launch] ") and " restart" in line
                 for line in f)

  def epochs(self, records):
    if self.sync:
      return core.sync_epochs(records, GLOBAL_BATCH, self.examples)
    return sum(len(r["ids"]) for r in records) // self.examples


"""Chaos on the rig: an elastic Horovod job over hosts that die, drop off
the network, stall, slow down, join and come back, in an order and at moments
drawn from a seed, so that a run that fails replays with the same seed.

Each fault is one the framework handles alone (tests/multihost); what this
driver adds is their meeting during a long run, at moments the job does not
choose: a fault may land during a commit (the job commits every few
updates) or while a joined host still starts. Faults do not overlap: the
driver waits for the job to train again, and for a commit after that,
before the next one, so that each recovery is measured on its own.

The job is the exactly-once tests' worker (`tests.workers.position_run`): a
small model whose every rank logs the example ids of every update, so the
driver can count, over every restart, that each example of each finished
epoch was trained once (`tests.helpers.trained_ids`). host1 runs horovodrun's
driver and is never faulted (its loss ends any horovodrun job: a scheduler's
requeue is the Slurm rig's business).

  python -m tools.rig.chaos --seed 7 --minutes 60 --report docs/chaos.json
"""
import argparse
import dataclasses
import glob
import json
import os
import pathlib
import random
import signal
import subprocess
import tempfile
import time

from tests.helpers import trained_ids
from tests.helpers.processes import ROOT
from tests.helpers.rig import ENV, HOROVODRUN, PYTHON, discovery, job_processes
from tools.rig import cluster as cluster_lib

KINDS = ("kill_rank", "kill_host", "link_down", "pause", "slow", "join")
"""kill_rank: SIGKILL a rank (horovodrun blacklists its host for the
cooldown); kill_host: every process of a host, sshd too, then the discovery
drops it until it is brought back; link_down: its cable pulled past the
collective timeout, dropped from discovery meanwhile; pause: SIGSTOP a rank
past the collective timeout, then SIGCONT; slow: a host capped at a fifth of
a core for a while; join: a spare host listed by the discovery."""

RESTARTS = ("kill_rank", "kill_host", "link_down", "pause")
"""The kinds after which the job must start a new session to go on."""

COLLECTIVE_TIMEOUT = 30
"""HOROVOD_GLOO_TIMEOUT_SECONDS of the job: how long ranks wait for a
stalled or cut-off peer, and a joining rank for the others (a busy host takes
seconds to import TensorFlow)."""

ABSORB_LIMIT = 60
"""Seconds from the moment the job can see a fault (at once for a kill; once
the collective timeout has passed for a stall or a cut) to its next update."""

EXAMPLES = 400
COMMIT = 10
PER_RANK_BATCH = 2


@dataclasses.dataclass
class Fault:
  """One fault: what, where, when it began and when the job trained again."""
  kind: str
  host: str
  began: float  # seconds since the job started
  visible: float  # when the job could first see it
  ended: float = None  # when the driver undid it (None: nothing to undo)
  recovery: float = None  # seconds from `visible` (or `ended`, where no
  # restart is needed) to the job's next update, in a new session where
  # the kind needs one


class Chaos:
  """Drives faults into one elastic Horovod job on `cluster`'s hosts."""

  def __init__(self, cluster, work_dir, seed, start_hosts=4,
               gap=(60.0, 180.0), kinds=KINDS, log=print):
    self.hosts = {h.name: h for h in cluster.hosts}
    self.work_dir = work_dir
    self.rng = random.Random(seed)
    self.gap = gap
    self.kinds = kinds
    self.log = log
    names = sorted(self.hosts, key=lambda n: self.hosts[n].index)
    self.active = names[:start_hosts]  # what the discovery script lists
    self.spare = names[start_hosts:]  # healthy hosts outside the job
    self.faults = []
    self.out = os.path.join(work_dir, "ids")
    self.model_dir = os.path.join(work_dir, "model")
    self.job_log = os.path.join(work_dir, "job.log")
    self._hosts_file = None
    self._job = None
    self._t0 = None

  # -- the job ------------------------------------------------------------------

  def start(self):
    self._hosts_file, discover = discovery(
        pathlib.Path(self.work_dir), *self.active)
    argv = [HOROVODRUN, "--gloo", "-np", str(len(self.active)),
            "--min-np", "2", "--max-np", str(len(self.hosts)),
            "--blacklist-cooldown-range", "10", "20", "--start-timeout", "180",
            "--host-discovery-script", str(discover),
            PYTHON, "-m", "tests.workers.position_run", "--elastic",
            "--distribution=horovod", f"--examples={EXAMPLES}",
            f"--global_batch_size={PER_RANK_BATCH * len(self.active)}",
            "--max_steps=100000000", "--seconds_per_update=0.05",
            f"--commit_every_n_steps={COMMIT}", f"--model_dir={self.model_dir}",
            f"--out_dir={self.out}", "--run=chaos"]
    env = dict(ENV, HOROVOD_GLOO_TIMEOUT_SECONDS=str(COLLECTIVE_TIMEOUT))
    with open(self.job_log, "w") as f:
      self._job = self.hosts["host1"].popen(
          argv, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
    self._t0 = time.monotonic()
    self._wait(lambda: self._updates_since(0), 240, "the job's first update")

  def stop(self, timeout=120):
    """Ends the job as a user would: SIGTERM to one rank, which stops every
    rank after the same update with a checkpoint. Returns its exit code."""
    for pid in self._rank_pids("host1"):
      _signal(pid, signal.SIGTERM)
    try:
      return self._job.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
      self._job.kill()
      raise cluster_lib.ClusterError(
          f"the job did not end within {timeout} s of a SIGTERM; see "
          f"{self.job_log}") from None

  def now(self):
    return time.monotonic() - self._t0

  # -- the faults ---------------------------------------------------------------

  def run(self, seconds, max_faults=None):
    """Injects faults for `seconds` (at most `max_faults` of them), each
    absorbed before the next."""
    while self.now() < seconds and len(self.faults) != max_faults:
      time.sleep(self.rng.uniform(*self.gap))
      if self.now() >= seconds:
        break
      kind, host = self._draw()
      fault = getattr(self, "_" + kind)(host)
      self.faults.append(fault)
      self._absorb(fault)
    self._heal()

  def _draw(self):
    """A kind the job's state allows, and its host: the job keeps two ranks
    at least (horovodrun's --min-np) and host1 (the driver); where none of
    the kinds asked for is allowed, a spare joins (there is always one then:
    every host the faults took out came back as one)."""
    faultable = [h for h in self.active if h != "host1"]
    allowed = [k for k in self.kinds if
               (k == "join" and self.spare) or
               (k == "slow" and self.active) or
               (k not in ("join", "slow") and faultable and
                len(self.active) > 2)]
    if not allowed:  # too few hosts left for the kinds asked for
      allowed = ["join"]
    kind = self.rng.choice(allowed)
    pool = {"join": self.spare, "slow": self.active}.get(kind, faultable)
    return kind, self.rng.choice(sorted(pool))

  def _fault(self, kind, host, visible_after=0.0):
    began = self.now()
    self.log(f"chaos {began:7.1f} s: {kind} {host}")
    return Fault(kind, host, began, began + visible_after)

  def _kill_rank(self, host):
    fault = self._fault("kill_rank", host)
    for pid in self._rank_pids(host):
      os.kill(pid, signal.SIGKILL)
    return fault

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
    fault = self._fault("pause", host, COLLECTIVE_TIMEOUT)
    pids = self._rank_pids(host)
    for pid in pids:
      _signal(pid, signal.SIGSTOP)
    time.sleep(2 * COLLECTIVE_TIMEOUT)
    for pid in pids:
      _signal(pid, signal.SIGCONT)
    fault.ended = self.now()
    return fault

  def _slow(self, host):
    fault = self._fault("slow", host)
    self.hosts[host].limit_cpu(0.2)
    time.sleep(self.rng.uniform(10, 30))
    self.hosts[host].limit_cpu(None)
    fault.ended = self.now()
    return fault

  def _join(self, host):
    fault = self._fault("join", host)
    self.spare.remove(host)
    self.active.append(host)
    self._write_hosts()
    return fault

  def _absorb(self, fault):
    """Waits until the job trains again after `fault` (in a new session for
    the kinds that need one), undoes what the fault left (a host brought
    back, a cable plugged in), then waits for a commit."""
    restart = fault.kind in RESTARTS

    # A fault that needs no restart has passed once it is undone.
    since = fault.visible if restart else max(fault.visible, fault.ended or 0)

    def trained():
      return self._updates_since(since, new_session=restart or
                                 fault.kind == "join")
    # Past the limit the run fails at the end, with the fault named; the
    # driver waits longer so that one slow recovery does not end the run.
    fault.recovery = self._wait(trained, 4 * ABSORB_LIMIT,
                                f"recovery from {fault}") - since
    self.log(f"chaos {self.now():7.1f} s: {fault.kind} {fault.host} absorbed "
             f"{fault.recovery:.1f} s after it could be seen")
    if fault.kind in ("kill_host", "link_down"):
      self._bring_back(fault)
    step = self._last_step()
    self._wait(lambda: self._last_step() >= (step // COMMIT + 1) * COMMIT,
               4 * ABSORB_LIMIT, "a commit after the recovery")

  def _bring_back(self, fault):
    host = self.hosts[fault.host]
    if fault.kind == "link_down":
      # What the cut left running there: the framework's watchdog ends a
      # rank whose launcher is gone; wait for it rather than clean up.
      deadline = time.monotonic() + ABSORB_LIMIT
      while job_processes(host) and time.monotonic() < deadline:
        time.sleep(0.5)
    else:
      host.start_sshd()
    fault.ended = self.now()
    self.spare.append(fault.host)
    self.log(f"chaos {fault.ended:7.1f} s: {fault.host} back, a spare")

  def _heal(self):
    for host in self.hosts.values():
      host.limit_cpu(None)

  # -- what the job shows -------------------------------------------------------

  def _list(self, without):
    self.active.remove(without)
    self._write_hosts()

  def _write_hosts(self):
    self._hosts_file.write_text("".join(f"{h}:1\n" for h in self.active))

  def _rank_pids(self, host):
    """The host's rank processes: not the shells ssh starts them through."""
    rank = [PYTHON, "-m", "tests.workers.position_run"]
    pids = []
    for pid in self.hosts[host].pids():
      try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
          argv = f.read().decode(errors="replace").split("\0")
      except FileNotFoundError:
        continue
      if argv[:3] == rank:
        pids.append(pid)
    return pids

  def _records(self):
    return trained_ids.read(self.out, "chaos")

  def _updates_since(self, since, new_session=False):
    """The time of the first update after `since` (seconds since the job
    started), of a session begun after it where `new_session`; else None."""
    t0 = time.time() - self.now()
    times = [r["time"] - t0 for r in self._records()
             if r["time"] - t0 > since and
             (not new_session or r["began"] - t0 > since)]
    return min(times) if times else None

  def _last_step(self):
    return max((r["step"] for r in self._records()), default=0)

  def _wait(self, condition, seconds, what):
    deadline = time.monotonic() + seconds
    while True:
      value = condition()
      if value:
        return value
      if self._job.poll() is not None:
        raise cluster_lib.ClusterError(
            f"the job ended (exit {self._job.returncode}) waiting for {what}; "
            f"see {self.job_log}")
      if time.monotonic() > deadline:
        raise cluster_lib.ClusterError(
            f"no {what} within {seconds} s; see {self.job_log}")
      time.sleep(0.5)

  # -- the verdict --------------------------------------------------------------

  def report(self, exit_code):
    """What the run shows: the faults, their recoveries, each example once."""
    records = self._records()
    try:
      restarts = len(trained_ids.check_each_once(records, EXAMPLES))
      problem = None
    except AssertionError as e:
      restarts, problem = None, str(e)[:2000]
    stream = trained_ids.kept_ids(records)[0] if problem is None else []
    faults = [dataclasses.asdict(f) for f in self.faults]
    return {
        "exit_code": exit_code,
        "faults": faults,
        "kinds": sorted({f.kind for f in self.faults}),
        "slowest_recovery": max((f["recovery"] for f in faults
                                 if f["recovery"] is not None), default=None),
        "updates": self._last_step(),
        "epochs": len(stream) // EXAMPLES,
        "restarts": restarts,
        "each_example_once": problem is None,
        "problem": problem,
        "processes_left": {h.name: job_processes(h)
                           for h in self.hosts.values() if job_processes(h)},
    }


def _signal(pid, signum):
  try:
    os.kill(pid, signum)
  except ProcessLookupError:
    pass


def run(seed, minutes, hosts=5, start_hosts=4, gap=(60.0, 180.0),
        kinds=KINDS, max_faults=None, work_dir=None, log=print):
  """A chaos run on a rig of `hosts` hosts; returns its report."""
  work_dir = work_dir or tempfile.mkdtemp(prefix="chaos-")
  with cluster_lib.Cluster(hosts, loopback_hostname=True) as rig:
    chaos = Chaos(rig, work_dir, seed, start_hosts, gap, kinds, log)
    chaos.start()
    try:
      chaos.run(minutes * 60, max_faults)
      exit_code = chaos.stop()
    finally:
      if chaos._job.poll() is None:  # pylint: disable=protected-access
        chaos._job.kill()  # pylint: disable=protected-access
    # The ranks end with horovodrun; give them the limit to go.
    deadline = time.monotonic() + ABSORB_LIMIT
    while (any(job_processes(h) for h in rig.hosts) and
           time.monotonic() < deadline):
      time.sleep(0.5)
    result = chaos.report(exit_code)
  result.update(seed=seed, minutes=minutes, gap=list(gap), hosts=hosts,
                namespaces_left=glob.glob(
                    f"/run/netns/{cluster_lib.NETNS_PREFIX}-{rig.name}-*"))
  return result


def render(report):
  """docs/CHAOS.md's text from a run's report."""
  rows = "\n".join(
      f"| {f['began']:.0f} | {f['kind']} | {f['host']} | "
      + ("not absorbed" if f["recovery"] is None else f"{f['recovery']:.1f}")
      + " |" for f in report["faults"])
  recoveries = [f["recovery"] for f in report["faults"]
                if f["recovery"] is not None]
  within = sum(r <= ABSORB_LIMIT for r in recoveries)
  return f"""# Chaos on the rig

An elastic Horovod job of {report['hosts'] - 1} hosts (and a spare) under
`python -m tools.rig.chaos --seed {report['seed']} --minutes {report['minutes']:g} --gap {' '.join(f'{g:g}' for g in report['gap'])}`:
faults drawn from the seed, each absorbed before the next
([many-hosts.md](many-hosts.md#chaos)), on one machine of two cores that
runs all five hosts' processes. This page is rendered from the run's JSON
report (`docs/chaos.json` beside it) by
`python -m tools.rig.chaos --render REPORT`.

| | |
|---|---|
| faults | {len(report['faults'])} of {len(report['kinds'])} kinds ({', '.join(report['kinds'])}) |
| updates | {report['updates']} ({report['epochs']} epochs of {EXAMPLES} examples) |
| restarts | {report['restarts']} |
| each example once an epoch | {'yes' if report['each_example_once'] else 'NO: ' + str(report['problem'])} |
| recoveries within {ABSORB_LIMIT} s | {within} of {len(recoveries)} (slowest {report['slowest_recovery'] or 0:.1f} s) |
| job's exit code | {report['exit_code']} |
| processes left on the hosts | {sum(len(p) for p in report['processes_left'].values())} |
| namespaces left | {len(report['namespaces_left'])} |

Recovery: seconds from the moment the job could see the fault (at once for
a kill or a join; after the collective timeout, {COLLECTIVE_TIMEOUT} s, for a
stalled rank or a cut link; once lifted for a slow host) to its next update,
in a new session where the fault needs one.

| at (s) | fault | host | recovery (s) |
|---|---|---|---|
{rows}
"""


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--minutes", type=float, default=60)
  parser.add_argument("--gap", type=float, nargs=2, default=(60, 180),
                      metavar=("MIN", "MAX"),
                      help="seconds between a fault's recovery and the next")
  parser.add_argument("--report", default=None,
                      help="write the report here as JSON")
  parser.add_argument("--render", default=None, metavar="REPORT",
                      help="print docs/CHAOS.md from a report; run nothing")
  args = parser.parse_args(argv)
  if args.render:
    with open(args.render) as f:
      print(render(json.load(f)), end="")
    return
  result = run(args.seed, args.minutes, gap=tuple(args.gap))
  text = json.dumps(result, indent=1)
  if args.report:
    with open(args.report, "w") as f:
      f.write(text + "\n")
  print(text)


if __name__ == "__main__":
  main()

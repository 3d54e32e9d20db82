"""What every backend's chaos shares: the seed's draws, the faults' record,
the wait for each recovery, and what the job's trained ids show.

A backend's driver (horovod.py, ps.py) starts its job, says which faults
its state allows, injects them and ends the job; this base class runs the
loop: a gap drawn from the seed, a fault, its recovery measured, a commit
after it, the next.
"""
import collections
import contextlib
import dataclasses
import errno
import glob
import os
import random
import re
import signal
import subprocess
import threading
import time

from tests.helpers import trained_ids
from tests.helpers.rig import PYTHON, job_processes
from tools.rig import cluster as cluster_lib

ABSORB_LIMIT = 60
"""Seconds from the moment the job can see a fault (at once for a kill; once
the collective timeout has passed for a stall or a cut) to its next update."""

CASES = {"mlp": 400, "click": 40000}
"""The job's network and data (`tests.workers.position_run --case`), and
the examples an epoch: the MLP on a few random labels, many epochs an hour;
the click model with sharded tables on enough generated clicks that the
held-out AUC its fault-free run is judged by (`fault_free`) means
something."""
COMMIT = 10

ERROR_LOOKING = re.compile(
    r"\b(error|exception|traceback|fatal|abort(ed)?|failed|failure)\b|"
    r"\] [EF]\d{4} ", re.IGNORECASE)
"""What a user scanning a log would take for trouble: the words, and the
error and fatal lines of TensorFlow's C++ log."""

MOMENT_WAIT = 4 * ABSORB_LIMIT
"""Seconds the driver waits for the job to begin the moment a fault is
aimed at (a save comes every few updates; a re-shard after its lead-in
join's restart) before it injects the fault at once instead."""
RELEASE_SECONDS = 1.0
"""How long the process that began the moment is held there after the
fault went in: a kill or a stop lands while it is held, a cut link or a
full disk while it goes on with the moment."""

OPT_IN = ("oom",)
"""Kinds no backend draws unless asked (`--kinds`, or named by a schedule):
a seed draws the faults it drew before they existed. oom: the kernel's OOM
killer takes a host's biggest process (a task of the job) at a memory
ceiling dropped under what the host holds, then lifted again."""

WORKER = [PYTHON, "-m", "tests.workers.position_run"]
"""The job's processes: the exactly-once tests' worker, every process of
which logs the example ids of its updates."""


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
  moment: str = None  # the moment of the job it was aimed at (`moments`)
  moment_host: str = None  # where a process had begun that moment
  note: str = None  # why a fault has no recovery of its own


class Driver:
  """Faults drawn from `seed` into one job on `cluster`'s hosts, each
  absorbed before the next.

  A backend sets `restarts` (the kinds after which its job must start a
  new session to go on) and `global_batch`, and defines `start`, `stop`, `_draw`, one `_KIND`
  method per kind it injects, and `_bring_back`.
  """

  restarts = ()
  moments = ("save",)
  """The moments of `estimator_scale.moments` the backend's job has: a
  fault is aimed at each as often as at a random time."""
  global_batch = None
  """Examples an update, where the job keeps it whatever its size: its
  fault-free run is then the same training (`fault_free`)."""

  def __init__(self, cluster, work_dir, seed, gap=(60.0, 180.0), kinds=(),
               log=print, case="mlp"):
    self.hosts = {h.name: h for h in cluster.hosts}
    self.case, self.examples = case, CASES[case]
    self.work_dir = work_dir
    self.rng = random.Random(seed)
    # A stream of its own: the kinds, hosts and gaps a seed drew before
    # faults were aimed at moments stay the same.
    self._moment_rng = random.Random(f"moments-{seed}")
    self.moments_dir = os.path.join(work_dir, "moments")
    os.makedirs(self.moments_dir, exist_ok=True)
    self.gap = gap
    self.kinds = kinds
    self.log = log
    self.faults = []
    self.skipped = []  # a schedule's entries the job's state did not allow
    self.out = os.path.join(work_dir, "ids")
    self.model_dir = os.path.join(work_dir, "model")
    self.job_log = os.path.join(work_dir, "job.log")
    self._stop_file = os.path.join(work_dir, "stop_at")
    self._job = None
    self._t0 = None
    self._calm_from = None  # the job log's size once the last fault passed

  def now(self):
    return time.monotonic() - self._t0

  def names(self):
    """The hosts in their order on the rig: host1 first."""
    return sorted(self.hosts, key=lambda n: self.hosts[n].index)

  # -- the faults ---------------------------------------------------------------

  def run(self, seconds, max_faults=None, schedule=None):
    """Injects faults for `seconds` (at most `max_faults` of them), each
    absorbed before the next (a host brought back is a `join` of its
    own, where the backend records one): drawn from the seed, or, given a
    `schedule` (`check_schedule`'s entries), its faults in its order, an
    entry the job's state does not allow when it comes skipped and said."""
    planned = None if schedule is None else iter(schedule)
    while self.now() < seconds and (max_faults is None or
                                    len(self.faults) < max_faults):
      entry = None if planned is None else next(planned, None)
      if planned is not None and entry is None:
        break
      time.sleep(self.rng.uniform(*self.gap) if entry is None
                 else entry["after"])
      if self.now() >= seconds:
        break
      if entry is None:
        kind, host = self._draw()
        moment = self._moment_rng.choice((None,) + self.moments)
      else:
        kind, moment = entry["kind"], entry.get("during")
        host = self._scheduled_host(entry)
        if host is None:
          continue
      taken_on = self._at_moment(moment, kind) if moment else None
      fault = getattr(self, "_" + kind)(host)
      if taken_on:
        fault.moment, fault.moment_host = moment, taken_on
      self.faults.append(fault)
      self._absorb(fault)
    self._heal()
    self._calm_from = os.path.getsize(self.job_log)

  def _scheduled_host(self, entry):
    """The host a schedule's `entry` hits (its own, else the first its kind
    may hit), or None where the job's state does not allow it now: the
    entry is then skipped, said and recorded."""
    kind, host = entry["kind"], entry.get("host")
    allowed = self._kinds_now()
    if kind not in allowed:
      refusal = f"the job's state allows {', '.join(allowed)}"
    else:
      hosts = self._hosts_for(kind)
      if hosts and host in (None, *hosts):
        return host or hosts[0]
      refusal = f"{kind} can hit {', '.join(hosts) or 'no host'}"
    self.log(f"chaos {self.now():7.1f} s: scheduled {kind} {host or ''} "
             f"skipped: {refusal} now")
    self.skipped.append(dict(entry, why=refusal))
    return None

  def _draw(self):
    """A kind the job's state allows and a host it may hit, from the seed."""
    kind = self.rng.choice(self._kinds_now())
    return kind, self.rng.choice(self._hosts_for(kind))

  def _kinds_now(self):
    """The kinds of `kinds` the job's state allows now, in their order."""
    return list(self.kinds)

  def _hosts_for(self, kind):
    """The hosts a fault of `kind` may hit now, in the order draws take."""
    raise NotImplementedError

  def _at_moment(self, moment, kind):
    """Waits until a process of the job begins `moment` (`_lead_in` makes
    one come where the job needs a change for it) and holds it there for
    the fault about to go in; returns that process's host, or None where the
    moment did not come within MOMENT_WAIT (the fault then goes in at
    once)."""
    if not self._lead_in(moment, kind):
      self.log(f"chaos {self.now():7.1f} s: no {moment} can come before this "
               f"{kind}; the fault goes in now")
      return None
    armed = os.path.join(self.moments_dir, f"{moment}.armed")
    with open(armed, "w", encoding="utf-8"):
      pass
    deadline = time.monotonic() + MOMENT_WAIT
    while True:
      taken = [p for p in glob.glob(os.path.join(self.moments_dir,
                                                 f"{moment}.*"))
               if p != armed]
      if taken:
        threading.Timer(RELEASE_SECONDS, remove_quietly, [taken[0]]).start()
        name = os.path.basename(taken[0])[len(moment) + 1:]
        host = name.rsplit(".", 1)[0]
        self.log(f"chaos {self.now():7.1f} s: {moment} begun on {host}")
        return host
      if time.monotonic() > deadline and remove_quietly(armed):
        self.log(f"chaos {self.now():7.1f} s: no {moment} within "
                 f"{MOMENT_WAIT} s; the fault goes in now")
        return None
      time.sleep(0.02)

  def _lead_in(self, moment, kind):
    """Brings on `moment` where the job needs a change for it; False where
    it cannot before a fault of `kind`. The saves and merges come on their
    own."""
    del moment, kind
    return True

  def _fault(self, kind, host, visible_after=0.0):
    began = self.now()
    self.log(f"chaos {began:7.1f} s: {kind} {host}")
    return Fault(kind, host, began, began + visible_after)

  def _slow(self, host):
    fault = self._fault("slow", host)
    self.hosts[host].limit_cpu(0.2)
    time.sleep(self.rng.uniform(10, 30))
    self.hosts[host].limit_cpu(None)
    fault.ended = self.now()
    return fault

  def _oom(self, host):
    """The `oom` fault: the kernel's OOM killer takes the host's biggest
    process, as when a job outgrows a machine (`Host.oom_kill`)."""
    fault = self._fault("oom", host)
    taken = self.hosts[host].oom_kill()
    fault.ended = self.now()  # the ceiling is back
    self.log(f"chaos {fault.ended:7.1f} s: oom {host}: the OOM killer took "
             f"{taken}")
    return fault

  def arm_memory(self):
    """Where `oom` is among the kinds, gives every host a memory cgroup (no
    cap) before the job starts: its tasks are born in it, so what they hold
    is charged there and a kill frees it."""
    if "oom" in self.kinds:
      for host in self.hosts.values():
        host.limit_memory(None)

  def _fill_disk(self, host):
    """The `disk_full` fault, recorded on `host`: the model_dir's disk
    (`small_disk`) full for a while, then freed."""
    fault = self._fault("disk_full", host)
    filler = fill(self.model_dir)
    time.sleep(self.rng.uniform(10, 30))
    os.remove(filler)
    fault.ended = self.now()
    return fault

  def _kill(self, kind, host, pids):
    """A fault that SIGKILLs `pids`, the job's processes on `host`."""
    fault = self._fault(kind, host)
    for pid in pids:
      os.kill(pid, signal.SIGKILL)
    return fault

  def _stop_for(self, host, pids, timeout):
    """The `pause` fault: SIGSTOP to `pids` for twice the job's `timeout`
    (the peers give up on them half way), then SIGCONT."""
    fault = self._fault("pause", host, timeout)
    for pid in pids:
      signal_quietly(pid, signal.SIGSTOP)
    time.sleep(2 * timeout)
    for pid in pids:
      signal_quietly(pid, signal.SIGCONT)
    fault.ended = self.now()
    return fault

  def _absorb(self, fault, new_session=None):
    """Waits until the job trains again after `fault` (in a new session for
    the kinds that need one), undoes what the fault left (a host brought
    back, a cable plugged in), then waits for a commit."""
    restart = fault.kind in self.restarts

    # A fault that needs no restart has passed once it is undone.
    since = fault.visible if restart else max(fault.visible, fault.ended or 0)
    if new_session is None:
      # The launcher takes a host back at a restart; a chief whose save
      # failed on a full disk fails, and so do its restarts until the disk
      # has room again.
      new_session = restart or fault.kind in ("join", "disk_full")

    def trained():
      return self._updates_since(since, new_session=new_session)
    # Past the limit the run fails at the end, with the fault named; the
    # driver waits longer so that one slow recovery does not end the run.
    fault.recovery = self._wait(trained, 4 * ABSORB_LIMIT,
                                f"recovery from {fault}") - since
    self.log(f"chaos {self.now():7.1f} s: {fault.kind} {fault.host} absorbed "
             f"{fault.recovery:.1f} s after it could be seen")
    if fault.kind in ("kill_host", "link_down"):
      self._bring_back(fault)
    self._wait_commit()

  def _undo(self, fault):
    """Brings a killed host back (its sshd), or, after a cut, waits for what
    the cut left running there to end: the framework stops a task whose
    launcher is gone, and the driver waits for that rather than clean up."""
    host = self.hosts[fault.host]
    if fault.kind == "link_down":
      deadline = time.monotonic() + ABSORB_LIMIT
      while job_processes(host) and time.monotonic() < deadline:
        time.sleep(0.5)
    else:
      host.start_sshd()
    fault.ended = self.now()

  def _wait_commit(self):
    step = self._last_step()
    self._wait(lambda: self._last_step() >= (step // COMMIT + 1) * COMMIT,
               4 * ABSORB_LIMIT, "a commit after the recovery")

  def _worker_argv(self, global_batch):
    """The job's worker command, ended by `_stop_later` (a job whose
    command is the same at every restart cannot be given its last step)."""
    return [*WORKER, f"--case={self.case}", f"--examples={self.examples}",
            f"--global_batch_size={global_batch}", "--max_steps=100000000",
            f"--save_checkpoints_steps={COMMIT}", "--seconds_per_update=0.05",
            f"--stop_at_file={self._stop_file}",
            f"--model_dir={self.model_dir}", f"--out_dir={self.out}",
            f"--moments_dir={self.moments_dir}", "--run=chaos"]

  def _stop_later(self):
    """Names a step a few commits ahead in the job's --stop_at_file, which
    every task reads before it gets there; returns the step."""
    target = (self._last_step() // COMMIT + 3) * COMMIT
    with open(self._stop_file + ".tmp", "w", encoding="utf-8") as f:
      f.write(str(target))
    os.rename(self._stop_file + ".tmp", self._stop_file)
    self.log(f"chaos {self.now():7.1f} s: the job stops at step {target}")
    return target

  def _heal(self):
    for host in self.hosts.values():
      host.limit_cpu(None)

  # -- what the job shows -------------------------------------------------------

  def _worker_pids(self, host):
    """The host's job processes: not the shells ssh starts them through."""
    pids = []
    for pid in self.hosts[host].pids():
      try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
          argv = f.read().decode(errors="replace").split("\0")
      except (FileNotFoundError, ProcessLookupError):  # gone meanwhile
        continue
      if argv[:3] == WORKER:
        pids.append(pid)
    return pids

  def left(self, host):
    """What of the job still runs on `host`."""
    return job_processes(host)

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

  def check(self, records):
    """(restarts, None) where `records` keep the backend's exactly-once
    claim, else (None, what breaks it); `trained_ids.check_each_once`
    unless a backend claims less."""
    try:
      return len(trained_ids.check_each_once(records, self.examples)), None
    except AssertionError as e:
      return None, str(e)[:2000]

  def epochs(self, records):
    return len(trained_ids.kept_ids(records)[0]) // self.examples

  def report(self, exit_code):
    """What the run shows: the faults, their recoveries, each example once."""
    records = self._records()
    restarts, problem = self.check(records)
    faults = [dataclasses.asdict(f) for f in self.faults]
    return {
        "exit_code": exit_code,
        "case": self.case,
        "examples": self.examples,
        "faults": faults,
        "skipped": self.skipped,
        "kinds": sorted({f.kind for f in self.faults}),
        "slowest_recovery": max((f["recovery"] for f in faults
                                 if f["recovery"] is not None), default=None),
        "updates": self._last_step(),
        "epochs": self.epochs(records) if problem is None else 0,
        "restarts": restarts,
        "each_example_once": problem is None,
        "problem": problem,
        "processes_left": {h.name: self.left(h)
                           for h in self.hosts.values() if self.left(h)},
        "error_lines_at_end": error_lines(self.job_log, self._calm_from),
    }


SCHEDULE_KEYS = ("after", "kind", "host", "during")


def choose_kinds(defaults, asked=None, schedule=None):
  """The kinds a driver injects: `asked`, else the backend's `defaults`,
  with each OPT_IN kind a `schedule` entry names; raises ValueError naming
  a kind the backend does not have and those it has."""
  valid = tuple(defaults) + tuple(k for k in OPT_IN if k not in defaults)
  kinds = tuple(asked) if asked else tuple(defaults)
  unknown = [k for k in kinds if k not in valid]
  if unknown:
    raise ValueError(f"kinds {unknown}: this job's kinds are "
                     f"{', '.join(valid)}")
  named = {e.get("kind") for e in schedule or () if isinstance(e, dict)}
  return kinds + tuple(k for k in OPT_IN if k in named and k not in kinds)


def check_schedule(entries, driver, where="the schedule"):
  """`entries` (a list of {"after": seconds after the last fault's
  recovery, "kind", optional "host" (else the first the job's state
  allows), optional "during": a moment}) checked against `driver`'s kinds,
  hosts and moments; raises ValueError naming the entry and what would be
  valid."""
  if not isinstance(entries, list) or not entries:
    raise ValueError(f"{where}: a non-empty list of faults is wanted, got "
                     f"{type(entries).__name__}")
  for number, entry in enumerate(entries):
    def refuse(what, number=number):
      raise ValueError(f"{where}, fault {number}: {what}")
    if not isinstance(entry, dict):
      refuse(f"an object with {', '.join(SCHEDULE_KEYS)} is wanted")
    unknown = sorted(set(entry) - set(SCHEDULE_KEYS))
    if unknown:
      refuse(f"unknown keys {unknown}; valid: {', '.join(SCHEDULE_KEYS)}")
    after = entry.get("after")
    if (not isinstance(after, (int, float)) or isinstance(after, bool)
        or after < 0):
      refuse(f"after={after!r}: seconds >= 0 are wanted")
    if entry.get("kind") not in driver.kinds:
      refuse(f"kind={entry.get('kind')!r}; this job's kinds are "
             f"{', '.join(driver.kinds)}")
    if entry.get("host") not in (None, *driver.hosts):
      refuse(f"host={entry['host']!r}; the rig's hosts are "
             f"{', '.join(driver.names())}")
    if entry.get("during") not in (None, *driver.moments):
      refuse(f"during={entry['during']!r}; this job's moments are "
             f"{', '.join(driver.moments)}")
  return entries


def error_lines(path, offset):
  """The error-looking lines of the log at `path` from byte `offset`: once
  the last fault has been absorbed, the job's way to its end must show none
  (the faults' own lines come before)."""
  if offset is None:
    return []
  with open(path, "rb") as f:
    f.seek(offset)
    text = f.read().decode(errors="replace")
  return [line for line in text.splitlines() if ERROR_LOOKING.search(line)]


DISK = {"mlp": "64m", "click": "512m"}
"""The size of the disk the job's model_dir is on (`small_disk`), by case:
room for an hour's checkpoints and summaries (the click job's graph, with
accumulation's loop, is 3 MB in each checkpoint's meta graph and again in
the events file at each restart), little enough to fill at once."""


@contextlib.contextmanager
def small_disk(path, size):
  """`path` on a tmpfs of `size` while inside, so that a fault can fill the
  job's model_dir without filling the machine's disk. Mounted before the
  rig's hosts are made, it is in each host's copy of the mounts."""
  os.makedirs(path, exist_ok=True)
  subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                  path], check=True)
  try:
    yield path
  finally:
    subprocess.run(["umount", "--lazy", path], check=False)


def fill(directory):
  """Writes a file into `directory` until its disk has no room left;
  returns the file's path (removing it frees the disk)."""
  path = os.path.join(directory, "chaos-fill")
  fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
  chunk = bytes(1 << 20)
  try:
    while True:
      os.write(fd, chunk)
  except OSError as e:
    if e.errno != errno.ENOSPC:
      raise
  finally:
    os.close(fd)
  return path


def remove_quietly(path):
  """Removes `path`; False where it was gone already."""
  try:
    os.remove(path)
    return True
  except FileNotFoundError:
    return False


def signal_quietly(pid, signum):
  try:
    os.kill(pid, signum)
  except ProcessLookupError:
    pass


UNLOGGED = -1
"""The id `check_sync` gives the examples of an update a checkpoint holds
and a task did not log."""


def _fill_checkpointed(records, global_batch):
  """`records` and, for each update a restart resumed from that a task did
  not log, a record of UNLOGGED ids in its place.

  A synchronous update is in a checkpoint only once the chief applied every
  worker's gradient, but a task logs it only when its own run returns (a
  parameter-server worker after the chief's token) and its hooks after the
  checkpoint saver's.
  A fault in between (a cut ps before a worker takes its token, a task
  killed right after the save) leaves the update trained and its ids
  unlogged there, and the restart resumes after it."""
  sessions = collections.defaultdict(lambda: collections.defaultdict(dict))
  began = {}
  for r in records:
    key = (r["start"], r["size"])
    sessions[key][r["step"]][r["worker"]] = r
    began[key] = min(began.get(key, r["began"]), r["began"])
  order = sorted(sessions, key=began.get)
  filled = list(records)
  for key, after in zip(order, order[1:]):
    start, size = key
    resumed = after[0]
    logged = sessions[key].get(resumed, {})
    if resumed <= start:
      continue
    for worker in set(range(size)) - set(logged):
      filled.append(dict(worker=worker, size=size, start=start, step=resumed,
                         ids=[UNLOGGED] * (global_batch // size),
                         began=began[key], time=began[key]))
  return filled


def sync_epochs(records, global_batch, examples):
  """The whole epochs of `examples` a synchronous job's kept updates
  trained, those a task did not log counted (`check_sync`)."""
  stream = trained_ids.kept_ids(_fill_checkpointed(records, global_batch))[0]
  return len(stream) // examples


def check_sync(records, global_batch, examples):
  """(restarts, None) where a synchronous job of `global_batch` examples an
  update trained every one of `examples` once an epoch (those of
  checkpointed updates a task did not log filling the examples missing from
  their epoch), else (None, what breaks it)."""
  try:
    stream, again, report = trained_ids.kept_ids(_fill_checkpointed(records, global_batch))
    assert len(stream) >= examples, (len(stream), examples)
    for begin in range(0, len(stream), examples):
      epoch = stream[begin:begin + examples]
      counts = collections.Counter(i for i in epoch if i != UNLOGGED)
      twice = sorted(i for i, n in counts.items() if n > 1)
      assert not twice, (begin // examples, "twice", twice)
      if len(epoch) == examples:
        never = examples - len(counts)
        assert never == epoch.count(UNLOGGED), (
            begin // examples, "never", never, epoch.count(UNLOGGED))
    everything = collections.Counter(i for r in records for i in r["ids"])
    kept = collections.Counter(i for i in stream if i != UNLOGGED)
    assert everything == kept + collections.Counter(again)
    return len(report), None
  except AssertionError as e:
    return None, str(e)[:2000]

"""A cluster of "hosts" on this one Linux machine, to rehearse multi-host jobs.

Multi-host code paths (horovodrun's ssh launch and NIC discovery, TF_CONFIG
workers on other addresses, host-local disks, a host or link that dies) only
run when there really are several hosts. Each host here is a set of Linux
namespaces that looks like a machine to the programs run in it:

- its own network namespace, with one interface named eth0 (same name on every
  host, as on a real cluster) joined to a bridge that lives in a namespace of
  its own, on a private subnet (10.77.K.0/24) that exists only inside these
  namespaces: the machine's real network is never touched;
- its own hostname and /etc/hosts (UTS and mount namespaces). With
  loopback_hostname=True a host's own name maps to 127.0.1.1, as on stock
  Debian, which is the case that breaks naive multi-host code;
- an sshd listening on its own address, and a root ssh setup (generated key,
  known_hosts, config) bound over /root/.ssh inside the host, so that plain
  `ssh host2 cmd` from any host logs in without prompts, the way horovodrun
  expects;
- optionally a private tmpfs (the host's own disk) and a tbf rate limit on its
  link (netem is missing from these kernels, so no delay or loss);
- on demand, a share of the CPUs (limit_cpu) and a memory ceiling
  (limit_memory), as cgroup v1 groups: past its ceiling the kernel's OOM
  killer takes the host's biggest process, as on a machine that size.

The namespaces are kept alive by one "holder" process per host (`sleep
infinity`); commands enter a host with `nsenter -t HOLDER -n -u -m`. A
process belongs to a host when it is in the host's network namespace, which
is how kill_all() and down() find exactly the processes a cluster owns, even
from another process and after a crash of the one that made it.

Needs root, iproute2, util-linux and openssh-server (tools/rig/setup_rig.sh).
Outside the namespaces it leaves only: /run/netns entries, the state
directory and the hosts' cgroups while up, and the empty directories it may
need as mount points (/root/.ssh, /run/sshd, the local disk's path).

  python -m tools.rig.cluster up 2 [--name rig] [--shape 100mbit]
                               [--loopback_hostname] [--local_disk [PATH]]
  python -m tools.rig.cluster exec host1 -- ssh host2 hostname
  python -m tools.rig.cluster status
  python -m tools.rig.cluster down

From Python (the pytest fixture in tests/multihost/conftest.py wraps this):

  with cluster.Cluster(2, loopback_hostname=True) as c:
      host1, host2 = c.hosts
      host1.run(host2.ssh_command("hostname")).stdout  # "host2\\n"
"""
import argparse
import contextlib
import dataclasses
import errno
import fcntl
import glob
import ipaddress
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

STATE_ROOT = "/run/estimator_scale_cluster"
# /24 subnets 10.77.K.0, one per cluster: K tells clusters apart, so several
# (parallel test runs) can be up at once.
SUBNET_BASE = ipaddress.ip_network("10.77.0.0/16")
NETNS_PREFIX = "escl"
SSHD = "/usr/sbin/sshd"
CPU_CGROUPS = "/sys/fs/cgroup/cpu"  # cgroup v1's cpu controller (limit_cpu)
MEMORY_CGROUPS = "/sys/fs/cgroup/memory"  # cgroup v1's memory controller
MEMSW_LIMIT = "memory.memsw.limit_in_bytes"  # memory+swap: absent without
# the kernel's swap accounting
UNLIMITED = 1 << 62  # a v1 memory limit this large reads as "no cap"
MiB = 1 << 20
OOM_HEADROOM = MiB  # over what a host holds when oom_kill lowers its cap
SSH_NO_STATUS = 255  # ssh's exit where the remote command died of a signal
# (sshd sends the signal, which the client does not pass on) or the
# connection dropped
KILLED_CODES = (-signal.SIGKILL, 128 + signal.SIGKILL, SSH_NO_STATUS)
"""Exit codes of a SIGKILLed process: subprocess's, a shell's, ssh's."""
DEFAULT_LOCAL_DISK = "/mnt/local"
NAME_RE = re.compile(r"^[a-z0-9_]{1,24}$")  # no "-": it separates netns name parts
HOST_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit)$", re.IGNORECASE)
RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


class ClusterError(RuntimeError):
  pass


def _sh(*argv, check=True, **kwargs):
  """Runs a setup command; a failure names the command and its stderr."""
  proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                        **kwargs)
  if check and proc.returncode != 0:
    raise ClusterError(f"{shlex.join(map(str, argv))} exited {proc.returncode}: "
                       f"{proc.stderr.strip()}")
  return proc


def _ns_inode(path):
  try:
    return os.stat(path).st_ino
  except OSError:
    return None


def _pids_in_netns(netns_path, exclude=()):
  """Live processes whose network namespace is the one at netns_path."""
  inode = _ns_inode(netns_path)
  if inode is None:
    return []
  pids = []
  for entry in os.listdir("/proc"):
    if entry.isdigit() and int(entry) not in exclude:
      # A zombie has no namespaces left: stat fails and it is skipped.
      if _ns_inode(f"/proc/{entry}/ns/net") == inode:
        pids.append(int(entry))
  return pids


def _kill_netns_processes(netns_path, exclude=(), timeout=10.0):
  """SIGKILLs until nothing is left in the namespace (children may fork)."""
  deadline = time.monotonic() + timeout
  while True:
    pids = _pids_in_netns(netns_path, exclude)
    if not pids:
      return
    if time.monotonic() > deadline:
      raise ClusterError(f"processes {pids} in {netns_path} survive SIGKILL")
    for pid in pids:
      with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.05)


def _rate_bytes(rate):
  match = RATE_RE.match(rate)
  if not match:
    raise ClusterError(f"rate {rate!r}: expected tc's bit units, e.g. 100mbit")
  return float(match.group(1)) * RATE_UNITS[match.group(2).lower()] / 8


def tbf_burst(rate, seconds=0.01):
  """Bytes a shaped link passes at once after an idle spell: `seconds` of
  traffic (10 ms by default), at least 64 KiB, or tbf cannot reach the rate
  with segmentation offload's large packets."""
  return max(64 * 1024, int(_rate_bytes(rate) * seconds))


@dataclasses.dataclass(frozen=True)
class MemoryUse:
  """A host's memory cgroup read back: its cap and what its processes held.

  Lets a test assert that no host went over its ceiling, and tell a process
  the OOM killer took from one killed for another reason.
  """
  limit: int  # bytes; None: no cap
  usage: int  # bytes held now
  peak: int  # the most bytes held at once since the group was made
  oom_kills: int  # processes the OOM killer took; None: the kernel keeps no count
  failcnt: int  # times an allocation hit the cap (memory, or memory+swap)

  @property
  def oom_killed(self):
    """Whether the OOM killer fired on the host."""
    return self.oom_killed_since(None)

  def oom_killed_since(self, before):
    """Whether the OOM killer fired since `before` (an earlier MemoryUse;
    None: ever). Without the kernel's count, a hit cap stands for a kill:
    with swap counted, the kernel's answer to one it cannot reclaim."""
    if self.oom_kills is None:
      return self.failcnt > (before.failcnt if before else 0)
    return self.oom_kills > ((before.oom_kills or 0) if before else 0)


def _mib(size):
  return f"{size / MiB:.0f}"


def oom_line(host, code, use, before=None):
  """The line naming `host` and what it held where a process of it that
  ended with `code` was taken by the OOM killer; else None.

  Args:
    host: the host's name.
    code: the process's exit code: subprocess's -9, a shell's 137, or
      ssh's 255 (`KILLED_CODES`); the count of kills tells them apart from
      another death.
    use: the host's MemoryUse after the process ended (None: no cgroup).
    before: its MemoryUse before the process started, so that an earlier
      kill is not taken for this one (None: any kill counts).
  """
  if code not in KILLED_CODES or use is None:
    return None
  if not use.oom_killed_since(before):
    return None
  if use.limit is None:
    return (f"{host}: killed by the out-of-memory killer (no memory ceiling "
            f"now; peak {_mib(use.peak)} MiB)")
  return (f"{host}: killed by the out-of-memory killer at its memory ceiling "
          f"of {_mib(use.limit)} MiB (peak {_mib(use.peak)} MiB)")


def _read_int(group, name, default=None):
  """A cgroup file's number; `default` where the kernel has no such file."""
  try:
    with open(os.path.join(group, name)) as f:
      return int(f.read())
  except FileNotFoundError:
    if default is None:
      raise
    return default


def read_memory_use(group):
  """The MemoryUse of the v1 memory cgroup at `group`; None where none is."""
  if not os.path.isdir(group):
    return None
  with open(os.path.join(group, "memory.oom_control")) as f:
    oom = dict(line.split() for line in f if line.strip())
  limit = _read_int(group, "memory.limit_in_bytes")
  return MemoryUse(
      limit=None if limit >= UNLIMITED else limit,
      usage=_read_int(group, "memory.usage_in_bytes"),
      peak=_read_int(group, "memory.max_usage_in_bytes"),
      oom_kills=int(oom["oom_kill"]) if "oom_kill" in oom else None,
      failcnt=(_read_int(group, "memory.failcnt") +
               _read_int(group, "memory.memsw.failcnt", 0)))


def _check_memory_controller(host):
  """Refuses, naming the host, where cgroup v1's memory controller is not
  mounted: making the group elsewhere would make something else."""
  if not os.path.exists(os.path.join(MEMORY_CGROUPS, "memory.limit_in_bytes")):
    raise ClusterError(
        f"{host}: no cgroup v1 memory controller at {MEMORY_CGROUPS} "
        "(limit_memory needs a kernel with cgroup v1's memory hierarchy "
        "mounted there)")


def _write_memory_limit(group, limit, host):
  """Sets the group's cap to `limit` bytes (None: none), and memory+swap's
  with it so that swap does not hide the cap. The kernel keeps memory+swap's
  at or above memory's: it goes first when the cap rises, last when it falls.
  """
  files = ["memory.limit_in_bytes"]
  if os.path.exists(os.path.join(group, MEMSW_LIMIT)):
    files.append(MEMSW_LIMIT)
    if limit is None or limit > _read_int(group, "memory.limit_in_bytes"):
      files.reverse()
  for name in files:
    try:
      with open(os.path.join(group, name), "w") as f:
        f.write("-1" if limit is None else str(limit))
    except OSError as e:
      if e.errno != errno.EBUSY:
        raise
      held = _read_int(group, "memory.usage_in_bytes")
      raise ClusterError(
          f"{host}: cannot cap its memory at {_mib(limit)} MiB: its "
          f"processes hold {_mib(held)} MiB now and the kernel could not "
          "reclaim enough; give a cap above that, or None for no cap") from None


def _adopt(group, pids):
  """Moves `pids` into the cgroup at `group` (one that ended meanwhile is
  skipped); what they start later is born in it."""
  for pid in pids:
    with contextlib.suppress(ProcessLookupError), open(
        os.path.join(group, "cgroup.procs"), "w") as f:
      f.write(str(pid))


_BALLOON = """\
import sys
group, before = sys.argv[1], int(sys.argv[2])
def kills():
  with open(group + "/memory.oom_control") as f:
    return int(dict(line.split() for line in f if line.strip())["oom_kill"])
print("ready", flush=True)
if sys.stdin.readline() != "go\\n":
  sys.exit()
held = []
while kills() == before and len(held) < 4096:
  held.append(b"\\1" * (1 << 20))
"""
"""The helper of Host.oom_kill: asks for memory a MiB at a time (written,
so that it is charged) until the group counts a kill past `before`. It
holds an interpreter's few MiB, so the killer, which takes the largest
resident process, takes a job's task before it (root without
CAP_SYS_RESOURCE cannot exempt it with oom_score_adj -1000)."""


def _start_balloon(group, before, host):
  """Starts _BALLOON in the cgroup at `group`; returns it once it waits
  for its go."""
  join = 'echo $$ > "$1/cgroup.procs" && exec "$2" -I -S -c "$3" "$1" "$4"'
  proc = subprocess.Popen(
      ["sh", "-c", join, "oom-balloon", group, sys.executable, _BALLOON,
       str(before)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True, start_new_session=True)
  if proc.stdout.readline() != "ready\n":
    proc.kill()
    raise ClusterError(f"{host}: the OOM fault's helper did not start: "
                       f"{proc.communicate()[0].strip()}")
  return proc


def _end_balloon(balloon, wait=5.0):
  """Waits for the helper to see the kill and exit, else kills it; True
  where the OOM killer took the helper itself."""
  try:
    balloon.communicate(timeout=wait)
  except subprocess.TimeoutExpired:
    balloon.kill()
    balloon.communicate()
    return False
  return balloon.returncode == -signal.SIGKILL


def _squeeze(group, host, tries=50):
  """Lowers the group's cap to OOM_HEADROOM over what it holds; retries
  while its processes' use moves under the write. Returns the cap."""
  for _ in range(tries):
    cap = _read_int(group, "memory.usage_in_bytes") + OOM_HEADROOM
    with contextlib.suppress(ClusterError):
      _write_memory_limit(group, cap, host)
      return cap
  raise ClusterError(f"{host}: its memory use moved under each of {tries} "
                     "tries to cap it just above it")


def _process_sizes(pids):
  """{pid: (resident bytes, command line)} of those of `pids` still alive."""
  sizes = {}
  page = os.sysconf("SC_PAGE_SIZE")
  for pid in pids:
    try:
      with open(f"/proc/{pid}/statm") as f:
        resident = int(f.read().split()[1]) * page
      with open(f"/proc/{pid}/cmdline", "rb") as f:
        cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):  # gone meanwhile
      continue
    sizes[pid] = (resident, cmdline.strip())
  return sizes


def _taken(held, live, wait=2.0):
  """What the OOM killer took: the largest of `held` (_process_sizes) no
  longer among `live()`, waiting `wait` s for it to exit."""
  deadline = time.monotonic() + wait
  while True:
    gone = set(held) - set(live())
    if gone or time.monotonic() > deadline:
      break
    time.sleep(0.02)
  if not gone:
    return "a process that had not exited after its kill"
  pid = max(gone, key=lambda p: held[p][0])
  resident, cmdline = held[pid]
  return f"pid {pid} ({cmdline[:100]}), {_mib(resident)} MiB resident"


@contextlib.contextmanager
def _state_lock():
  """Serializes subnet choice and name checks between processes."""
  os.makedirs(STATE_ROOT, mode=0o755, exist_ok=True)
  with open(os.path.join(STATE_ROOT, ".lock"), "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    yield


class Host:
  """One host of a Cluster: run commands in it, cut or slow its link, kill it."""

  def __init__(self, cluster, index, name, address, pid=None):
    self.cluster = cluster
    self.index = index
    self.name = name
    self.address = address
    self.pid = pid  # the holder process: its namespaces are the host's
    self.netns = f"{NETNS_PREFIX}-{cluster.name}-{name}"
    self.bridge_port = f"port{index}"  # eth0's peer, in the bridge namespace

  def __repr__(self):
    return f"Host({self.name}, {self.address})"

  # -- running commands -------------------------------------------------------

  def command(self, cmd, cwd=None):
    """argv that runs cmd (argv list, or a string for sh -c) inside the host.

    The command keeps the caller's environment (PATH included) and working
    directory, unlike a login over ssh, which gets sshd's environment. It
    joins the host's CPU and memory cgroups where it has them, as what the
    host's own processes start does.
    """
    if isinstance(cmd, str):
      cmd = ["sh", "-c", cmd]
    argv = ["nsenter", "-t", str(self.pid), "-n", "-u", "-m",
            f"--wd={cwd or os.getcwd()}", "--"] + [str(c) for c in cmd]
    groups = [g for g in (os.path.join(CPU_CGROUPS, self.netns),
                          self._memory_group()) if os.path.isdir(g)]
    if not groups:
      return argv
    join = "".join(f"echo $$ > {shlex.quote(g)}/cgroup.procs && "
                   for g in groups)
    return ["sh", "-c", join + 'exec "$@"', self.name] + argv

  def run(self, cmd, cwd=None, **kwargs):
    """subprocess.run of cmd inside the host; captures text output by default."""
    if "stdout" not in kwargs and "stderr" not in kwargs:
      kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    return subprocess.run(self.command(cmd, cwd), **kwargs)

  def popen(self, cmd, cwd=None, **kwargs):
    """subprocess.Popen of cmd inside the host."""
    return subprocess.Popen(self.command(cmd, cwd), **kwargs)

  def ssh_command(self, cmd, options=()):
    """argv that, run in any host of the cluster, runs cmd on this one over ssh.

    This is what horovodrun does to start a remote rank: the command gets
    sshd's environment (HOME=/root, root's login PATH), not the caller's, so
    name programs by absolute path.
    """
    if not isinstance(cmd, str):
      cmd = shlex.join(str(c) for c in cmd)
    return ["ssh", *options, self.name, cmd]

  # -- faults -------------------------------------------------------------------

  def pids(self):
    """The host's processes, its holder excluded."""
    return _pids_in_netns(f"/run/netns/{self.netns}", exclude=(self.pid,))

  def kill_all(self):
    """Kills every process of the host (sshd too), as if it lost power.

    The holder stays, so the host can come back (start_sshd). A real crash
    sends nothing to the peers; here the kernel closes the dead processes'
    sockets. Cut the link first (set_link(False)) to hide that from them.
    """
    _kill_netns_processes(f"/run/netns/{self.netns}", exclude=(self.pid,))

  def limit_cpu(self, cores):
    """Caps the host's processes at `cores` CPUs (e.g. 0.25): a slow host.

    A cgroup (v1 cpu controller) with that quota takes every process of the
    host now, and whatever they start later inherits it; None lifts the cap.
    down() removes the cgroup.
    """
    if cores is not None and not 0 < cores:
      raise ClusterError(f"cores={cores!r}: give a share of CPUs > 0, or "
                         "None for no cap")
    group = os.path.join(CPU_CGROUPS, self.netns)
    os.makedirs(group, exist_ok=True)
    with open(os.path.join(group, "cpu.cfs_period_us")) as f:
      period = int(f.read())
    with open(os.path.join(group, "cpu.cfs_quota_us"), "w") as f:
      f.write("-1" if cores is None else str(int(period * cores)))
    _adopt(group, self.pids())

  def limit_memory(self, limit):
    """Caps the host's processes at `limit` bytes together: a smaller machine.

    A cgroup (v1 memory controller; memory+swap too, so that swap does not
    hide the cap) takes every process of the host now, and whatever they
    start later (over ssh: sshd's children) inherits it, as for limit_cpu;
    None lifts the cap. What a process held before it joined stays charged
    where it was (the kernel moves no charges), so cap a host before its job
    starts. Past the cap the kernel's OOM killer takes the host's biggest
    process (memory_use, why_killed). down() removes the cgroup.
    """
    if limit is not None and (isinstance(limit, bool) or
                              not isinstance(limit, int) or limit <= 0):
      raise ClusterError(f"{self.name}: memory limit {limit!r}: give bytes "
                         "> 0 (an int), or None for no cap")
    _check_memory_controller(self.name)
    group = self._memory_group()
    os.makedirs(group, exist_ok=True)
    _write_memory_limit(group, limit, self.name)
    _adopt(group, self.pids())

  def memory_use(self):
    """The host's MemoryUse (cap, peak, OOM kills); None before limit_memory."""
    return read_memory_use(self._memory_group())

  def why_killed(self, code, before=None):
    """The line saying the OOM killer took a process of the host that ended
    with `code`, at what ceiling and peak; None where it did not
    (`oom_line`; `before`: memory_use() from before the process started)."""
    return oom_line(self.name, code, self.memory_use(), before)

  def oom_kill(self, timeout=30.0):
    """Has the kernel's OOM killer take the host's biggest process, as on a
    machine out of memory; returns what it took ("pid N (command), X MiB").

    The cap drops to just over what the host holds and a small helper asks
    for more; the cap goes back as soon as a kill is counted, so that one
    process is taken even where the others' memory is charged elsewhere
    (they joined the group late).
    """
    use = self.memory_use()
    previous = use.limit if use else None
    self.limit_memory(previous)  # the group, with every process of the host
    held = _process_sizes(self.pids())
    if not held:
      raise ClusterError(f"{self.name} runs nothing for the OOM killer to "
                         "take: start its job first")
    group = self._memory_group()
    before = self.memory_use().oom_kills
    if before is None:
      raise ClusterError(f"{self.name}: this kernel counts no OOM kills "
                         f"(no oom_kill in {group}/memory.oom_control)")
    balloon = _start_balloon(group, before, self.name)
    try:
      cap = _squeeze(group, self.name)
      balloon.stdin.write("go\n")
      balloon.stdin.flush()
      self._wait_oom_kill(group, before, balloon, cap, timeout)
    finally:
      _write_memory_limit(group, previous, self.name)
      took_helper = _end_balloon(balloon)
    if took_helper:
      return (f"the fault's own helper (nothing on {self.name} held more "
              "than its few MiB)")
    return _taken(held, self.pids)

  def _wait_oom_kill(self, group, before, balloon, cap, timeout):
    """Returns once the group counts a kill past `before`: polled often,
    the cap (`cap` bytes) going back right after takes no second process."""
    deadline = time.monotonic() + timeout
    while read_memory_use(group).oom_kills == before:
      # Read again once it is gone: the kill may be its own.
      if (balloon.poll() is not None and
          read_memory_use(group).oom_kills == before):
        raise ClusterError(f"{self.name}: the OOM fault's helper exited "
                           f"{balloon.returncode} before any kill: "
                           f"{balloon.stdout.read().strip()}")
      if time.monotonic() > deadline:
        raise ClusterError(f"{self.name}: no OOM kill within {timeout} s of "
                           f"its cap dropping to {_mib(cap)} MiB")
      time.sleep(0.005)

  def _memory_group(self):
    return os.path.join(MEMORY_CGROUPS, self.netns)

  def set_link(self, up):
    """Plugs (True) or pulls (False) the host's cable, at the bridge's side.

    eth0 stays configured, so connections hang and time out as on a real
    network instead of failing at once with "network unreachable".
    """
    _sh("ip", "-n", self.cluster.bridge_netns, "link", "set",
        self.bridge_port, "up" if up else "down")

  def shape(self, rate, burst=None):
    """Limits the link to rate (tc units: "100mbit") each way; None lifts it.

    burst: the token bucket's bytes (default tbf_burst(rate)); what passes
    at line speed after an idle spell, which a real link of that rate does
    not do.
    """
    links = [(self.netns, "eth0"), (self.cluster.bridge_netns, self.bridge_port)]
    for netns, dev in links:
      if rate is None:
        _sh("tc", "-n", netns, "qdisc", "del", "dev", dev, "root", check=False)
        continue
      _sh("tc", "-n", netns, "qdisc", "replace", "dev", dev, "root", "tbf",
          "rate", rate, "burst", burst or tbf_burst(rate), "latency", "50ms")

  def start_sshd(self):
    """Starts the host's sshd and waits until it accepts connections."""
    state = self.cluster.state_dir
    pid_file = os.path.join(state, f"{self.name}.sshd.pid")
    with contextlib.suppress(FileNotFoundError):
      os.remove(pid_file)
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privilege separation
    proc = self.run([SSHD, "-f", os.path.join(state, "sshd_config"),
                     "-E", os.path.join(state, f"{self.name}.sshd.log"),
                     "-o", f"PidFile={pid_file}"],
                    env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    if proc.returncode != 0:
      raise ClusterError(f"sshd on {self.name}: {proc.stderr.strip()}")
    # sshd writes its pid file once it listens.
    deadline = time.monotonic() + 10
    while not os.path.exists(pid_file):
      if time.monotonic() > deadline:
        raise ClusterError(f"sshd on {self.name} did not start; see "
                           f"{state}/{self.name}.sshd.log")
      time.sleep(0.02)

  # -- setup --------------------------------------------------------------------

  def _create(self, prefix_len):
    """Namespace, cable to the bridge, address, and the holder process."""
    bridge = self.cluster.bridge_netns
    _sh("ip", "netns", "add", self.netns)
    _sh("ip", "-n", bridge, "link", "add", self.bridge_port, "type", "veth",
        "peer", "name", "eth0", "netns", self.netns)
    _sh("ip", "-n", bridge, "link", "set", self.bridge_port, "master", "br0", "up")
    _sh("ip", "-n", self.netns, "addr", "add", f"{self.address}/{prefix_len}",
        "dev", "eth0")
    _sh("ip", "-n", self.netns, "link", "set", "eth0", "up")
    _sh("ip", "-n", self.netns, "link", "set", "lo", "up")
    # nsenter and unshare both exec in place: the pid is sleep's. A session
    # of its own keeps it out of the caller's Ctrl-C. Not `ip netns exec`:
    # it remounts /sys, hiding the machine's /sys/fs/cgroup, without which
    # slurmd does not start (tools/rig/slurm.py).
    holder = subprocess.Popen(
        ["nsenter", f"--net=/run/netns/{self.netns}", "unshare", "--uts",
         "--mount", "--propagation", "private", "sleep", "infinity"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True)
    self.pid = holder.pid
    # Ready once unshare has made the new UTS namespace.
    deadline = time.monotonic() + 10
    while (_ns_inode(f"/proc/{self.pid}/ns/uts") == _ns_inode("/proc/self/ns/uts")
           or _ns_inode(f"/proc/{self.pid}/ns/net") != _ns_inode(f"/run/netns/{self.netns}")):
      if holder.poll() is not None or time.monotonic() > deadline:
        raise ClusterError(f"holder of {self.name} did not start "
                           f"(exit {holder.poll()})")
      time.sleep(0.01)

  def _hosts_file(self, loopback_hostname):
    lines = [f"# /etc/hosts of {self.name}, cluster {self.cluster.name} "
             "(tools/rig/cluster.py)",
             "127.0.0.1\tlocalhost",
             "::1\tlocalhost ip6-localhost ip6-loopback"]
    if loopback_hostname:
      lines.append(f"127.0.1.1\t{self.name}")
    for host in self.cluster.hosts:
      if host is not self or not loopback_hostname:
        lines.append(f"{host.address}\t{host.name}")
    return "\n".join(lines) + "\n"

  def _configure(self, loopback_hostname, local_disk):
    """Hostname, /etc/hosts, /root/.ssh and the local disk, in its namespaces."""
    state = self.cluster.state_dir
    hosts_path = os.path.join(state, f"{self.name}.hosts")
    with open(hosts_path, "w") as f:
      f.write(self._hosts_file(loopback_hostname))
    os.makedirs("/root/.ssh", mode=0o700, exist_ok=True)  # mount point only
    script = [f"hostname {shlex.quote(self.name)}",
              f"mount --bind {shlex.quote(hosts_path)} /etc/hosts",
              f"mount --bind {shlex.quote(os.path.join(state, 'ssh'))} /root/.ssh"]
    if local_disk:
      disk = shlex.quote(local_disk)
      script += [f"mkdir -p {disk}", f"mount -t tmpfs -o mode=0755 tmpfs {disk}"]
    proc = self.run(" && ".join(script), cwd="/")
    if proc.returncode != 0:
      raise ClusterError(f"configuring {self.name}: {proc.stderr.strip()}")


class Cluster:
  """N hosts on a private bridge; a context manager that always tears down.

  name tells clusters apart (namespaces, subnet, state directory); by default
  a name unique to this process is made. Hosts are named f"{prefix}{i}",
  i = 1..n, with addresses 10.77.K.i.
  """

  _made = 0

  def __init__(self, n=2, name=None, *, prefix="host", shape=None,
               loopback_hostname=False, local_disk=None, ephemeral=True):
    if name is None:
      Cluster._made += 1
      name = f"p{os.getpid()}n{Cluster._made}"
    if not NAME_RE.match(name):
      raise ClusterError(f"cluster name {name!r}: use [a-z0-9_], at most 24")
    if not 1 <= n <= 250:
      raise ClusterError(f"{n} hosts: 1 to 250 fit a /24")
    if not HOST_RE.match(f"{prefix}{n}"):
      raise ClusterError(f"host name prefix {prefix!r}: use [a-z][a-z0-9-]")
    if shape:
      _rate_bytes(shape)
    self.name = name
    self.n = n
    self.prefix = prefix
    self.shape_rate = shape
    self.loopback_hostname = loopback_hostname
    self.local_disk = local_disk
    # An ephemeral cluster dies with the process that made it: the next up()
    # on this machine removes it if that process is gone (a killed test run).
    self.ephemeral = ephemeral
    self.state_dir = os.path.join(STATE_ROOT, name)
    self.bridge_netns = f"{NETNS_PREFIX}-{name}-bridge"
    self.subnet = None
    self.hosts = []

  def __repr__(self):
    return f"Cluster({self.name}, {self.subnet}, {self.hosts})"

  def __enter__(self):
    if not self.hosts:
      self.up()
    return self

  def __exit__(self, *exc):
    self.down()

  def host(self, name):
    for host in self.hosts:
      if host.name == name:
        return host
    raise ClusterError(f"no host {name!r} in cluster {self.name} "
                       f"({', '.join(h.name for h in self.hosts)})")

  # -- lifecycle ----------------------------------------------------------------

  def up(self):
    """Creates the hosts and starts their sshd; undoes everything on failure."""
    # Under the lock throughout: a half-made cluster has no process to show
    # it is alive, and another up() would take it for a crashed run's.
    with _state_lock():
      _reap_orphans()
      if os.path.exists(self.state_dir) or _netns_of(self.name):
        if _cluster_alive(self.name):
          raise ClusterError(
              f"cluster {self.name!r} is already up (state in {self.state_dir}); "
              f"stop it first: python -m tools.rig.cluster down --name {self.name}")
        down(self.name)  # leftovers of a crashed run
      self.subnet = _free_subnet()
      os.makedirs(self.state_dir, mode=0o755)
      addresses = list(self.subnet.hosts())
      self.hosts = [Host(self, i, f"{self.prefix}{i}", str(addresses[i - 1]))
                    for i in range(1, self.n + 1)]
      try:
        self._save()
        _sh("ip", "netns", "add", self.bridge_netns)
        _sh("ip", "-n", self.bridge_netns, "link", "add", "br0", "type", "bridge")
        _sh("ip", "-n", self.bridge_netns, "link", "set", "br0", "up")
        for host in self.hosts:
          host._create(self.subnet.prefixlen)
          self._save()
        self._write_ssh_files()
        for host in self.hosts:
          host._configure(self.loopback_hostname, self.local_disk)
          host.start_sshd()
          if self.shape_rate:
            host.shape(self.shape_rate)
      except BaseException:
        self.down()
        raise
    return self

  def down(self):
    """Stops every process of every host and removes the namespaces; idempotent."""
    down(self.name)

  # -- state --------------------------------------------------------------------

  def _save(self):
    state = {
        "name": self.name, "subnet": str(self.subnet), "prefix": self.prefix,
        "loopback_hostname": self.loopback_hostname,
        "local_disk": self.local_disk, "shape": self.shape_rate,
        "owner_pid": os.getpid() if self.ephemeral else None,
        "hosts": [{"name": h.name, "address": h.address, "pid": h.pid}
                  for h in self.hosts],
    }
    path = os.path.join(self.state_dir, "cluster.json")
    with open(path + ".tmp", "w") as f:
      json.dump(state, f, indent=1)
    os.replace(path + ".tmp", path)

  @classmethod
  def attach(cls, name):
    """The cluster `name` brought up by this or another process."""
    try:
      with open(os.path.join(STATE_ROOT, name, "cluster.json")) as f:
        state = json.load(f)
    except FileNotFoundError:
      raise ClusterError(f"no cluster {name!r} is up (nothing in "
                         f"{STATE_ROOT}/{name})") from None
    cluster = cls(len(state["hosts"]), name, prefix=state["prefix"],
                  shape=state["shape"], loopback_hostname=state["loopback_hostname"],
                  local_disk=state["local_disk"],
                  ephemeral=state["owner_pid"] is not None)
    cluster.subnet = ipaddress.ip_network(state["subnet"])
    cluster.hosts = [Host(cluster, i, h["name"], h["address"], h["pid"])
                     for i, h in enumerate(state["hosts"], start=1)]
    return cluster

  def _write_ssh_files(self):
    """One host key and one root key per cluster, shared by its hosts."""
    state = self.state_dir
    ssh_dir = os.path.join(state, "ssh")  # bound over /root/.ssh in every host
    os.makedirs(ssh_dir, mode=0o700)
    host_key = os.path.join(state, "ssh_host_ed25519_key")
    user_key = os.path.join(ssh_dir, "id_ed25519")
    for key in (host_key, user_key):
      _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C",
          f"cluster {self.name}", "-f", key)
    with open(user_key + ".pub") as f:
      public_user_key = f.read()
    with open(os.path.join(state, "authorized_keys"), "w") as f:
      f.write(public_user_key)
    with open(host_key + ".pub") as f:
      public_host_key = " ".join(f.read().split()[:2])
    names = ["localhost", "127.0.0.1", "127.0.1.1"]
    names += [n for h in self.hosts for n in (h.name, h.address)]
    with open(os.path.join(ssh_dir, "known_hosts"), "w") as f:
      f.write(f"{','.join(names)} {public_host_key}\n")
    # The user's key and host check are pinned, so nothing prompts; a dead
    # peer fails a connection in seconds instead of TCP's two minutes.
    with open(os.path.join(ssh_dir, "config"), "w") as f:
      f.write(f"# root's ssh client inside cluster {self.name} (tools/rig/cluster.py)\n"
              "Host *\n"
              "  IdentityFile /root/.ssh/id_ed25519\n"
              "  IdentitiesOnly yes\n"
              "  UserKnownHostsFile /root/.ssh/known_hosts\n"
              "  StrictHostKeyChecking yes\n"
              "  BatchMode yes\n"
              "  ConnectTimeout 10\n"
              "  LogLevel ERROR\n")
    with open(os.path.join(state, "sshd_config"), "w") as f:
      f.write(f"# sshd of every host of cluster {self.name} (tools/rig/cluster.py)\n"
              "Port 22\n"
              f"HostKey {host_key}\n"
              f"AuthorizedKeysFile {state}/authorized_keys\n"
              "UsePAM no\n"
              "PermitRootLogin prohibit-password\n"
              "PasswordAuthentication no\n"
              "KbdInteractiveAuthentication no\n"
              "X11Forwarding no\n"
              "PrintMotd no\n"
              # horovodrun opens one session per rank and host at once.
              "MaxStartups 100:30:200\n"
              "MaxSessions 100\n")


def _netns_of(name):
  """Network namespaces of cluster `name` (hosts and bridge)."""
  try:
    entries = os.listdir("/run/netns")
  except FileNotFoundError:
    return []
  return [e for e in entries
          if e.split("-", 2)[:2] == [NETNS_PREFIX, name] and e.count("-") >= 2]


def _cluster_alive(name):
  return any(_pids_in_netns(f"/run/netns/{ns}") for ns in _netns_of(name))


def _free_subnet():
  used = set()
  for name in os.listdir(STATE_ROOT):
    with contextlib.suppress(OSError, ValueError, KeyError):
      with open(os.path.join(STATE_ROOT, name, "cluster.json")) as f:
        used.add(json.load(f)["subnet"])
  for subnet in SUBNET_BASE.subnets(new_prefix=24):
    if str(subnet) not in used:
      return subnet
  raise ClusterError("all 256 cluster subnets of 10.77.0.0/16 are in use")


def _reap_orphans():
  """Tears down ephemeral clusters whose owner process is gone."""
  for name in os.listdir(STATE_ROOT):
    with contextlib.suppress(OSError, ValueError, KeyError):
      with open(os.path.join(STATE_ROOT, name, "cluster.json")) as f:
        owner = json.load(f)["owner_pid"]
      if owner is not None and not os.path.exists(f"/proc/{owner}"):
        down(name)


def _remove_cgroup(path, timeout=5.0):
  """rmdir of a cgroup whose processes were killed: busy until they are gone."""
  deadline = time.monotonic() + timeout
  while True:
    try:
      os.rmdir(path)
      return
    except OSError:
      if time.monotonic() > deadline:
        raise ClusterError(f"cgroup {path} stays busy: "
                           f"{open(os.path.join(path, 'cgroup.procs')).read()}")
      time.sleep(0.05)


def down(name):
  """Stops cluster `name`: kills its processes, deletes its namespaces.

  Works from its namespaces alone, so it also cleans up after an up() that
  crashed before it could write its state; a no-op for a cluster not up.
  """
  for netns in _netns_of(name):
    _kill_netns_processes(f"/run/netns/{netns}")
  for netns in _netns_of(name):  # the bridge's goes too, and the cables with it
    _sh("ip", "netns", "del", netns, check=False)
  for controller in (CPU_CGROUPS, MEMORY_CGROUPS):
    for group in glob.glob(os.path.join(controller,
                                        f"{NETNS_PREFIX}-{name}-*")):
      _remove_cgroup(group)
  shutil.rmtree(os.path.join(STATE_ROOT, name), ignore_errors=True)


def status(name):
  """Lines describing cluster `name`: hosts, processes, link and shaping."""
  cluster = Cluster.attach(name)
  lines = [f"cluster {name}: {cluster.subnet}, state in {cluster.state_dir}"]
  for host in cluster.hosts:
    link = _sh("ip", "-n", cluster.bridge_netns, "-br", "link", "show",
               host.bridge_port, check=False).stdout.split()
    qdisc = _sh("tc", "-n", host.netns, "qdisc", "show", "dev", "eth0",
                check=False).stdout
    rate = re.search(r"tbf .*?rate (\S+)", qdisc)
    alive = os.path.exists(f"/proc/{host.pid}")
    lines.append(f"  {host.name:10} {host.address:15} "
                 f"{'up' if alive else 'DEAD':4} link {link[1] if link else '?':5} "
                 f"rate {rate.group(1) if rate else 'unlimited':9} "
                 f"{len(host.pids()) if alive else 0} processes"
                 f"{_memory_status(host.memory_use())}")
  return lines


def _memory_status(use):
  """status()'s words for a host's memory cgroup; empty where it has none."""
  if use is None:
    return ""
  cap = "no cap" if use.limit is None else f"cap {_mib(use.limit)} MiB"
  return (f", memory {cap}, peak {_mib(use.peak)} MiB, "
          f"{use.oom_kills if use.oom_kills is not None else '?'} OOM kills")


def main(argv=None):
  parser = argparse.ArgumentParser(
      description=__doc__.split("\n\n")[0],
      epilog="Needs root. Hosts reach each other by name; the machine "
             "itself cannot reach them (their bridge is private).")
  sub = parser.add_subparsers(dest="action", required=True)
  up_parser = sub.add_parser("up", help="create N hosts")
  up_parser.add_argument("n", type=int)
  up_parser.add_argument("--shape", metavar="RATE",
                         help="limit every host's link, e.g. 100mbit")
  up_parser.add_argument(
      "--loopback_hostname", action="store_true",
      help="map each host's own name to 127.0.1.1 (stock Debian)")
  up_parser.add_argument(
      "--local_disk", nargs="?", const=DEFAULT_LOCAL_DISK, metavar="PATH",
      help=f"a private tmpfs per host at PATH (default {DEFAULT_LOCAL_DISK})")
  up_parser.add_argument("--prefix", default="host", help="host name prefix")
  sub.add_parser("down", help="stop the cluster (a no-op when not up)")
  sub.add_parser("status", help="show the hosts")
  exec_parser = sub.add_parser(
      "exec", usage="%(prog)s [--name NAME] HOST -- CMD [ARG ...]",
      help="run a command inside a host, with this shell's environment")
  exec_parser.add_argument("host")
  for p in sub.choices.values():
    p.add_argument("--name", default="rig", help="cluster name (default rig)")
  argv = sys.argv[1:] if argv is None else list(argv)
  # Split by hand: everything after the first "--" is the command, options
  # that look like ours included.
  cmd = argv[argv.index("--") + 1:] if "--" in argv else []
  args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
  if os.geteuid() != 0:
    parser.error("needs root (network namespaces, mounts, sshd)")
  try:
    if args.action == "up":
      cluster = Cluster(args.n, args.name, prefix=args.prefix, shape=args.shape,
                        loopback_hostname=args.loopback_hostname,
                        local_disk=args.local_disk, ephemeral=False).up()
      print("\n".join(status(cluster.name)))
      name = "" if args.name == "rig" else f" --name {args.name}"
      print(f"run in a host: python -m tools.rig.cluster exec{name} "
            f"{cluster.hosts[0].name} -- ssh {cluster.hosts[-1].name} hostname")
    elif args.action == "down":
      down(args.name)
    elif args.action == "status":
      print("\n".join(status(args.name)))
    elif args.action == "exec":
      if not cmd:
        parser.error("exec: no command (usage: exec HOST -- cmd ...)")
      host = Cluster.attach(args.name).host(args.host)
      return host.run(cmd, capture_output=False).returncode
  except ClusterError as e:
    print(f"cluster: {e}", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())

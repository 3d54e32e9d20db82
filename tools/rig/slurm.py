"""A real Slurm cluster on the rig's hosts: slurmctld, a slurmd per host, munge.

Slurm code paths (a task that reads its step from srun's variables, a node
that dies mid-job, a requeued batch job) only run under a real slurmctld and
slurmd. This starts Debian's Slurm (slurm-wlm, tools/rig/setup_rig.sh) on
the hosts of a tools/rig/cluster.py Cluster:

- one munged, in the first host, whose socket (a file in the cluster's state
  directory, every directory above it open to all, as munged demands) every
  host's daemons and clients use;
- slurmctld on the first host (its host name must be SlurmctldHost), a
  slurmd on every host (each finds its NodeName from its host name), all in
  the foreground, so that the cluster's teardown, which kills every process
  of its hosts, stops them too;
- a slurm.conf tuned for a rig: no cgroup containment, nodes DOWN 5 s after
  they stop answering, a scheduler that runs every second.

Every daemon lives in a host's network namespace, so `Cluster.down()` ends
them all, even after a crash of the process that started them.

  with cluster.Cluster(2, prefix="n") as hosts, slurm.Slurm(hosts) as s:
      s.run(["srun", "-N2", "hostname"]).stdout  # "n1\\nn2\\n"
"""
import os
import subprocess
import time

from tools.rig import cluster as cluster_lib

SBIN = "/usr/sbin"
MUNGE_KEY_BYTES = 1024


class SlurmError(cluster_lib.ClusterError):
  pass


def slurm_conf(name, hosts, state, cpus):
  """slurm.conf of the rig cluster `name` on `hosts` (the first controls)."""
  nodes = ",".join(h.name for h in hosts)
  return "\n".join([
      f"# Slurm of rig cluster {name} (tools/rig/slurm.py)",
      f"ClusterName={name}",
      f"SlurmctldHost={hosts[0].name}",
      "SlurmUser=root",
      "SlurmdUser=root",
      "AuthType=auth/munge",
      "CredType=cred/munge",
      # 5 s, munge's least: a credential outlives no test.
      f"AuthInfo=socket={state}/munge/munge.socket,cred_expire=5",
      f"StateSaveLocation={state}/slurmctld",
      f"SlurmctldPidFile={state}/slurmctld.pid",
      f"SlurmctldLogFile={state}/slurmctld.log",
      f"SlurmdSpoolDir={state}/slurmd-%n",
      f"SlurmdPidFile={state}/slurmd-%n.pid",
      f"SlurmdLogFile={state}/slurmd-%n.log",
      # The hosts share the machine's cgroups: nothing to contain in.
      "ProctrackType=proctrack/linuxproc",
      "TaskPlugin=task/none",
      "JobAcctGatherType=jobacct_gather/none",
      "SelectType=select/cons_tres",
      "SelectTypeParameters=CR_CPU",
      "MpiDefault=none",
      # A node set DOWN comes back once its slurmd answers again.
      "ReturnToService=1",
      # Longer than a stall a busy machine gives every host at once, which
      # would mark nodes DOWN that are up.
      "SlurmdTimeout=15",
      "MessageTimeout=2",
      "SchedulerParameters=sched_interval=1",
      "MailProg=/bin/true",
      f"NodeName={nodes} CPUs={cpus} State=UNKNOWN",
      f"PartitionName=rig Nodes={nodes} Default=YES MaxTime=INFINITE "
      "State=UP OverSubscribe=YES",
  ]) + "\n"


class Slurm:
  """Slurm on the hosts of a started Cluster; a context manager that stops it.

  Its daemons are processes of the cluster's hosts: stopping kills them
  (Cluster.down() would as well).
  """

  def __init__(self, cluster, cpus=2):
    self.cluster = cluster
    self.cpus = cpus
    self.state = os.path.join(cluster.state_dir, "slurm")
    self.conf = os.path.join(self.state, "slurm.conf")
    self.controller = cluster.hosts[0]

  def __enter__(self):
    return self.start()

  def __exit__(self, *exc):
    self.stop()

  @property
  def env(self):
    """Variables a Slurm client or daemon needs here (SLURM_CONF)."""
    return {"SLURM_CONF": self.conf}

  def run(self, argv, host=None, env=None, **kwargs):
    """subprocess.run of a Slurm command on `host` (default: the first)."""
    return (host or self.controller).run(
        argv, env=dict(env or os.environ, **self.env), **kwargs)

  def popen(self, argv, host=None, env=None, **kwargs):
    """subprocess.Popen of a Slurm command on `host` (default: the first)."""
    return (host or self.controller).popen(
        argv, env=dict(env or os.environ, **self.env), **kwargs)

  def start(self):
    """munged, slurmctld and every slurmd; returns once every node is idle."""
    os.makedirs(os.path.join(self.state, "slurmctld"))
    # munged refuses a socket in a directory that is not open to all.
    for path in (cluster_lib.STATE_ROOT, self.cluster.state_dir, self.state):
      os.chmod(path, 0o755)
    with open(self.conf, "w") as f:
      f.write(slurm_conf(self.cluster.name, self.cluster.hosts, self.state,
                         self.cpus))
    # Auto-detection fails on this kind of machine ("Hybrid mode is not
    # supported"); nothing uses cgroups (task/none), but slurmd loads one.
    with open(os.path.join(self.state, "cgroup.conf"), "w") as f:
      f.write("CgroupPlugin=cgroup/v1\n")
    self._start_munged()
    self._daemon(self.controller, "slurmctld", [f"{SBIN}/slurmctld", "-D"])
    for host in self.cluster.hosts:
      self._daemon(host, f"slurmd-{host.name}", [f"{SBIN}/slurmd", "-D"])
    self.wait_idle()
    return self

  def stop(self):
    """Kills the daemons (every process of the hosts) and forgets the state."""
    for host in self.cluster.hosts:
      host.kill_all()

  def _start_munged(self):
    munge = os.path.join(self.state, "munge")
    os.makedirs(munge, mode=0o755)
    key = os.path.join(munge, "munge.key")
    with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o400), "wb") as f:
      f.write(os.urandom(MUNGE_KEY_BYTES))
    proc = self.controller.run(
        [f"{SBIN}/munged", "--key-file", key,
         "--socket", os.path.join(munge, "munge.socket"),
         "--pid-file", os.path.join(munge, "munged.pid"),
         "--log-file", os.path.join(munge, "munged.log"),
         "--seed-file", os.path.join(munge, "munged.seed")])
    if proc.returncode != 0:
      raise SlurmError(f"munged: {proc.stderr.strip()}")

  def _daemon(self, host, name, argv):
    """Starts a foreground daemon on `host`, its output in name.out."""
    with open(os.path.join(self.state, f"{name}.out"), "w") as out:
      proc = self.popen(argv, host, stdin=subprocess.DEVNULL, stdout=out,
                        stderr=subprocess.STDOUT, start_new_session=True)
    time.sleep(0.2)
    if proc.poll() is not None:
      raise SlurmError(f"{name} exited {proc.returncode}: "
                       f"{self.log(name)[-2000:]}")

  def log(self, name):
    """The output of daemon `name` (slurmctld, slurmd-HOST)."""
    text = []
    for suffix in (".out", ".log"):
      path = os.path.join(self.state, name + suffix)
      if os.path.exists(path):
        with open(path, errors="replace") as f:
          text.append(f.read())
    return "\n".join(text)

  def node_states(self):
    """{node: state} as sinfo reports it ("idle", "alloc", "down*", ...)."""
    proc = self.run(["sinfo", "-h", "-N", "-o", "%N %T"])
    return dict(line.split() for line in proc.stdout.splitlines()
                if len(line.split()) == 2)

  def job(self, job_id):
    """{field: value} of `scontrol show job`: JobState, NodeList, Restarts..."""
    proc = self.run(["scontrol", "-o", "show", "job", str(job_id)])
    if proc.returncode != 0:
      raise SlurmError(f"scontrol show job {job_id}: {proc.stderr.strip()}")
    return dict(item.split("=", 1) for item in proc.stdout.split()
                if "=" in item)

  def wait_idle(self, timeout=30):
    """Waits until every node is idle; an error shows the daemons' logs."""
    deadline = time.monotonic() + timeout
    want = {h.name for h in self.cluster.hosts}
    while True:
      states = self.node_states()
      if set(states) == want and all(s == "idle" for s in states.values()):
        return
      if time.monotonic() > deadline:
        logs = "\n".join(f"--- {n}\n{self.log(n)[-1500:]}" for n in
                         ["slurmctld"] + [f"slurmd-{h}" for h in sorted(want)])
        raise SlurmError(f"Slurm nodes not idle after {timeout} s: {states}"
                         f"\n{logs}")
      time.sleep(0.2)

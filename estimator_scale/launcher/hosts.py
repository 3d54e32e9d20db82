"""Where a TF_CONFIG cluster's tasks run: --hosts, ports and the tasks."""
import dataclasses
import socket
from typing import Optional

DEFAULT_PORT = 2222


def free_ports(count):
  """Ports the OS says are free now (bound and released)."""
  sockets = []
  for _ in range(count):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    sockets.append(s)
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


@dataclasses.dataclass(frozen=True)
class Task:
  """One TF_CONFIG task: where it runs (host None: this machine)."""
  job: str
  index: int
  address: str
  host: Optional[str] = None

  @property
  def name(self):
    task = f"{self.job}:{self.index}"
    return f"{self.host} {task}" if self.host else task


def cluster_spec(tasks):
  """TF_CONFIG's {job: [host:port, ...]} of `tasks`."""
  cluster = {}
  for task in tasks:
    cluster.setdefault(task.job, []).append(task.address)
  return cluster


def local_tasks(workers, ps=0, chief=False):
  """Tasks on this machine's free ports (a chief is one task more)."""
  ports = iter(free_ports(workers + ps + int(chief)))
  jobs = [("chief", int(chief)), ("worker", workers), ("ps", ps)]
  return [Task(job, i, f"localhost:{next(ports)}")
          for job, count in jobs for i in range(count)]


def parse_hosts(spec, ps=0):
  """[(host, slots)] of "node1,node2:2"; HOST:0 is for ps tasks alone."""
  hosts = []
  for entry in spec.split(","):
    host, _, slots = entry.strip().partition(":")
    if not host or (slots and not slots.isdigit()):
      raise ValueError(f"--hosts entry {entry!r} is not HOST or HOST:SLOTS "
                       "(SLOTS >= 1, or 0 for a host of parameter servers "
                       "alone), e.g. --hosts node1,node2:2,node3:0")
    if slots and int(slots) == 0 and not ps:
      raise ValueError(f"--hosts entry {entry!r}: a host with no slots runs "
                       "parameter servers alone; give --ps N, or SLOTS >= 1")
    hosts.append((host, int(slots or 1)))
  names = [h for h, _ in hosts]
  if len(set(names)) != len(names):
    raise ValueError(f"--hosts names a host twice ({spec}); give it once "
                     "with its slots, e.g. node1:2")
  if not any(slots for _, slots in hosts):
    raise ValueError(f"--hosts {spec} has no slot for a training task; give "
                     "one host SLOTS >= 1")
  return hosts


def host_tasks(hosts, ps=0, chief=False, port=DEFAULT_PORT):
  """Tasks on `hosts`: slots are training tasks, ports counting up per host;
  ps tasks go round the slotless hosts if any, else all hosts."""
  tasks, next_port = [], {}
  for host, slots in hosts:
    for _ in range(slots):
      job = "chief" if chief and not tasks else "worker"
      index = sum(t.job == job for t in tasks)
      next_port[host] = next_port.get(host, port - 1) + 1
      tasks.append(Task(job, index, f"{host}:{next_port[host]}", host))
  servers = [host for host, slots in hosts if not slots] or [
      host for host, _ in hosts]
  for i in range(ps):
    host = servers[i % len(servers)]
    next_port[host] = next_port.get(host, port - 1) + 1
    tasks.append(Task("ps", i, f"{host}:{next_port[host]}", host))
  return tasks


def cluster_tasks(members, ps=0, chief=False, port=DEFAULT_PORT):
  """The tasks of `members` ([(host, slots)], or [(None, workers)] for here)."""
  if members[0][0] is None:
    return local_tasks(members[0][1], ps, chief)
  return host_tasks(members, ps, chief, port)


def training_tasks(members):
  """How many training tasks (the chief and workers) `members` run."""
  return sum(slots for _, slots in members)

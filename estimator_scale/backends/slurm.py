"""A Slurm step as a cluster: TF_CONFIG or Horovod ranks. TensorFlow-free."""
import dataclasses
import os
import re
import socket
import sys
import threading
import time
from typing import Tuple

from absl import logging

from estimator_scale import environment
from estimator_scale import errors

PROCID = "SLURM_PROCID"
NUM_TASKS = "SLURM_STEP_NUM_TASKS"
NODELIST = "SLURM_STEP_NODELIST"
TASKS_PER_NODE = "SLURM_STEP_TASKS_PER_NODE"
NUM_NODES = "SLURM_STEP_NUM_NODES"
NODENAME = "SLURMD_NODENAME"
LOCALID = "SLURM_LOCALID"
DISTRIBUTION = "SLURM_DISTRIBUTION"

DEFAULT_PORT = 2222

_REPEAT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def in_step(environ):
  """Whether this process is a task that Slurm started (srun, sbatch)."""
  return PROCID in environ


def _split_top_level(spec):
  """Splits a hostlist at the commas outside brackets."""
  items, depth, start = [], 0, 0
  for i, char in enumerate(spec):
    if char == "[":
      depth += 1
    elif char == "]":
      depth -= 1
    elif char == "," and depth == 0:
      items.append(spec[start:i])
      start = i + 1
  items.append(spec[start:])
  return items


def _expand_range(ranges, spec, variable):
  """["01", "02", "05"] of "01-02,05": numbers keep the low bound's width."""
  values = []
  for part in ranges.split(","):
    low, dash, high = part.partition("-")
    if not low.isdigit() or (dash and not high.isdigit()):
      raise errors.TopologyError(
          f"{variable}={spec!r}: {part!r} in [{ranges}] is not a number or "
          "a range LOW-HIGH, e.g. n[1-2,5]")
    high = high if dash else low
    if int(high) < int(low):
      raise errors.TopologyError(
          f"{variable}={spec!r}: range {part!r} runs backwards")
    values += [str(n).zfill(len(low)) for n in range(int(low), int(high) + 1)]
  return values


def _expand_name(item, spec, variable):
  """The host names one hostlist entry ("rack[1-2]-n[01-03]") stands for."""
  start = item.find("[")
  if start < 0:
    if "]" in item:
      raise errors.TopologyError(f"{variable}={spec!r}: ']' without '['")
    return [item]
  end = item.find("]", start)
  if end < 0:
    raise errors.TopologyError(f"{variable}={spec!r}: '[' is never closed")
  prefix, ranges, rest = item[:start], item[start + 1:end], item[end + 1:]
  tails = _expand_name(rest, spec, variable)
  return [prefix + value + tail
          for value in _expand_range(ranges, spec, variable)
          for tail in tails]


def expand_hostlist(spec, variable=NODELIST):
  """The host names of a Slurm hostlist, in order ("n[1-2,5]": n1, n2, n5).

  Raises:
    errors.TopologyError: naming `variable` when the list does not parse.
  """
  names = []
  for item in _split_top_level(spec.strip()):
    if not item:
      raise errors.TopologyError(
          f"{variable}={spec!r} has an empty entry; expected host names "
          "such as n1,n2 or n[1-2]")
    names += _expand_name(item, spec, variable)
  return names


def expand_tasks_per_node(spec, variable=TASKS_PER_NODE):
  """[2, 2, 1] of "2(x2),1": the tasks on each node of the node list."""
  counts = []
  for item in spec.strip().split(","):
    match = _REPEAT.match(item)
    if not match or int(match.group(1)) < 1 or match.group(2) == "0":
      raise errors.TopologyError(
          f"{variable}={spec!r}: {item!r} is not COUNT or COUNT(xNODES), "
          "e.g. 2(x3),1")
    counts += [int(match.group(1))] * int(match.group(2) or 1)
  return counts


def _required(environ, name):
  raw = environ.get(name, "").strip()
  if not raw:
    raise errors.TopologyError(
        f"{name} is not set: srun gives it to every task of a step; start "
        "each task with srun (inside salloc or an sbatch script), not from "
        "the batch script itself")
  return raw


def _int(environ, name, minimum):
  raw = _required(environ, name)
  if not raw.isdigit() or int(raw) < minimum:
    raise errors.TopologyError(f"{name}={raw!r} is not an integer >= "
                               f"{minimum}")
  return int(raw)


def _layout(counts, distribution):
  """The node index of each task, for Slurm's block or cyclic placement."""
  if distribution == "block":
    return [node for node, count in enumerate(counts) for _ in range(count)]
  placed, left = [], list(counts)
  while any(left):  # cyclic: one task per node with room, round after round
    for node, count in enumerate(left):
      if count:
        placed.append(node)
        left[node] -= 1
  return placed


@dataclasses.dataclass(frozen=True)
class Step:
  """The tasks of one Slurm step (`nodes`: each task's node) and our `task`."""
  task: int
  nodes: Tuple[str, ...]

  @property
  def size(self):
    return len(self.nodes)

  @property
  def node(self):
    """This task's node."""
    return self.nodes[self.task]

  def local_index(self, task):
    """`task`'s index among the tasks on its node, in task order."""
    return self.nodes[:task].count(self.nodes[task])

  def node_names(self):
    """The step's nodes, each once, in the order their first task comes."""
    return list(dict.fromkeys(self.nodes))

  def address(self, task, port):
    """host:port of `task`: ports count up from `port` on each node."""
    return f"{self.nodes[task]}:{port + self.local_index(task)}"


def read_step(environ):
  """This task's Step, checked against everything srun says.

  Raises:
    errors.TopologyError: naming the variable at fault.
  """
  size = _int(environ, NUM_TASKS, 1)
  task = _int(environ, PROCID, 0)
  if task >= size:
    raise errors.TopologyError(f"{PROCID}={task} is outside the step's "
                               f"{NUM_TASKS}={size} tasks (0..{size - 1})")
  nodes = expand_hostlist(_required(environ, NODELIST), NODELIST)
  counts = expand_tasks_per_node(_required(environ, TASKS_PER_NODE),
                                 TASKS_PER_NODE)
  if len(counts) != len(nodes):
    raise errors.TopologyError(
        f"{TASKS_PER_NODE}={environ[TASKS_PER_NODE]!r} gives {len(counts)} "
        f"node(s) but {NODELIST}={environ[NODELIST]!r} names {len(nodes)}")
  if NUM_NODES in environ and _int(environ, NUM_NODES, 1) != len(nodes):
    raise errors.TopologyError(
        f"{NUM_NODES}={environ[NUM_NODES]} but {NODELIST}="
        f"{environ[NODELIST]!r} names {len(nodes)} node(s)")
  if sum(counts) != size:
    raise errors.TopologyError(
        f"{TASKS_PER_NODE}={environ[TASKS_PER_NODE]!r} places {sum(counts)} "
        f"task(s) but {NUM_TASKS}={size}")
  distribution = environ.get(DISTRIBUTION, "block").split(":")[0]
  if distribution not in ("block", "cyclic"):
    raise errors.TopologyError(
        f"{DISTRIBUTION}={environ[DISTRIBUTION]!r}: tasks can be placed "
        "from the step's variables only for block (srun's default) or "
        "cyclic distributions; use srun -m block or -m cyclic")
  step = Step(task, tuple(nodes[n] for n in _layout(counts, distribution)))
  _check_own_place(step, environ)
  return step


def _check_own_place(step, environ):
  """Where srun says this task is must be where the layout puts it."""
  node = environ.get(NODENAME)
  if node is not None and node != step.node:
    raise errors.TopologyError(
        f"{NODENAME}={node!r} but task {step.task} of "
        f"{NODELIST}={environ[NODELIST]!r} with "
        f"{TASKS_PER_NODE}={environ[TASKS_PER_NODE]!r} belongs on "
        f"{step.node!r}; was the step started with srun --distribution "
        "other than block or cyclic?")
  local = environ.get(LOCALID)
  if local is not None and local != str(step.local_index(step.task)):
    raise errors.TopologyError(
        f"{LOCALID}={local!r} but task {step.task} is number "
        f"{step.local_index(step.task)} on {step.node!r} by the step's "
        "layout")


def _port(environ):
  raw = environ.get(environment.PORT, str(DEFAULT_PORT))
  if not raw.isdigit() or not 1024 <= int(raw) <= 65000:
    raise errors.ConfigError(
        f"{environment.PORT}={raw!r} is not a port in 1024..65000")
  return int(raw)


def ps_tasks(environ, size):
  """The parameter servers asked for by `environment.PS_TASKS` (0: none)."""
  raw = environ.get(environment.PS_TASKS, "0")
  if not raw.isdigit() or int(raw) >= size:
    raise errors.ConfigError(
        f"{environment.PS_TASKS}={raw!r}: the step has {size} task(s), so "
        f"give 0 to {size - 1} parameter servers (the first tasks), leaving "
        "at least one to train")
  return int(raw)


def tf_config(environ):
  """This task's TF_CONFIG dict: ps tasks first, then the chief, then workers.

  Raises:
    errors.TopologyError, errors.ConfigError: naming the variable at fault.
  """
  step = read_step(environ)
  port = _port(environ)
  ps = ps_tasks(environ, step.size)
  jobs = (["ps"] * ps + ["chief"] * bool(ps) +
          ["worker"] * (step.size - ps - bool(ps)))
  cluster = {}
  for task, job in enumerate(jobs):
    cluster.setdefault(job, []).append(step.address(task, port))
  index = jobs[:step.task].count(jobs[step.task])
  return {"cluster": cluster,
          "task": {"type": jobs[step.task], "index": index}}


TRAINERS_POLL_S = 2.0
"""How often a parameter server of a step looks for its trainers."""


def trainers(config):
  """[(label, "host:port")] of the chief and workers of a TF_CONFIG dict."""
  cluster = config["cluster"]
  return [(f"{job} {index}", address) for job in ("chief", "worker")
          for index, address in enumerate(cluster.get(job, []))]


def answers(address, timeout=1.0):
  """Whether a process listens at "host:port" (a trainer's gRPC server)."""
  host, _, port = address.rpartition(":")
  try:
    socket.create_connection((host, int(port)), timeout=timeout).close()
    return True
  except OSError:
    return False


def wait_for_trainers_to_end(tasks, probe=answers, sleep=time.sleep,
                             poll_seconds=TRAINERS_POLL_S):
  """Returns once every task has answered once and none answers any more."""
  seen = set()
  while True:
    up = {label for label, address in tasks if probe(address)}
    seen |= up
    if not up and len(seen) == len(tasks):
      return
    sleep(poll_seconds)


def _end_after_trainers(config):
  tasks = trainers(config)
  wait_for_trainers_to_end(tasks)
  logging.info("parameter server %d: its trainers (%s) have ended, so it "
               "ends too", config["task"]["index"],
               ", ".join(label for label, _ in tasks))
  sys.stdout.flush()
  sys.stderr.flush()
  # TensorFlow's server.join() never returns, and only the whole process
  # can leave it.
  os._exit(0)  # pylint: disable=protected-access


def end_with_trainers(config):
  """Ends this ps (status 0) once its trainers end, since srun waits for all."""
  threading.Thread(target=_end_after_trainers, args=(config,),
                   name="ps_ends_with_trainers", daemon=True).start()


@dataclasses.dataclass(frozen=True)
class Rank:
  """One task as a Horovod rank: what horovodrun would tell it."""
  hostname: str
  rank: int
  size: int
  local_rank: int
  local_size: int
  cross_rank: int
  cross_size: int

  def environment(self):
    """The HOROVOD_* variables horovodrun's Gloo launch gives this rank."""
    return {"HOROVOD_HOSTNAME": self.hostname,
            "HOROVOD_RANK": str(self.rank), "HOROVOD_SIZE": str(self.size),
            "HOROVOD_LOCAL_RANK": str(self.local_rank),
            "HOROVOD_LOCAL_SIZE": str(self.local_size),
            "HOROVOD_CROSS_RANK": str(self.cross_rank),
            "HOROVOD_CROSS_SIZE": str(self.cross_size)}


def horovod_ranks(step):
  """Every task of `step` as a Horovod rank, numbered as horovodrun does."""
  names = step.node_names()
  local_sizes = {name: step.nodes.count(name) for name in names}
  ranks = []
  for task, node in enumerate(step.nodes):
    local = step.local_index(task)
    peers = [n for n in names if local_sizes[n] > local]
    ranks.append(Rank(node, task, step.size, local, local_sizes[node],
                      peers.index(node), len(peers)))
  return ranks


def rendezvous_port(environ):
  """The port task 0 serves Horovod's Gloo rendezvous on."""
  return _port(environ)

"""Who this process is in the job: the one source of truth for "how many of us".

Sharding, lr scaling, AdaScale's S and chief-only side effects all read a
`Topology`; no other module parses TF_CONFIG or asks Horovod for its rank.
"""
import dataclasses
import json
import os

from estimator_scale import errors

BACKENDS = ("none", "mirrored", "multi_worker_mirrored", "parameter_server",
            "horovod")


TopologyError = errors.TopologyError
"""Kept here too: the modules that read the environment raise it by this name."""


@dataclasses.dataclass(frozen=True)
class Topology:
  """An immutable description of this process's place in the job.

  Attributes:
    backend: one of `BACKENDS`.
    num_workers: processes that compute gradients (Horovod ranks or TF_CONFIG
      workers, the chief included).
    worker_index: this process's index among them, 0-based.
    replicas_per_worker: model replicas inside one worker (`mirrored` devices).
    is_chief: whether this process writes checkpoints, summaries and exports.
    local_rank: index among the workers on this host (Horovod only).
    local_size: workers on this host.
  """
  backend: str = "none"
  num_workers: int = 1
  worker_index: int = 0
  replicas_per_worker: int = 1
  is_chief: bool = True
  local_rank: int = 0
  local_size: int = 1

  def __post_init__(self):
    if self.backend not in BACKENDS:
      raise TopologyError(f"unknown distribution {self.backend!r}; valid: "
                          f"{', '.join(BACKENDS)}")
    if self.num_workers < 1 or self.replicas_per_worker < 1:
      raise TopologyError("num_workers and replicas_per_worker must be >= 1")
    if not 0 <= self.worker_index < self.num_workers:
      raise TopologyError(f"worker index {self.worker_index} is outside the "
                          f"cluster of {self.num_workers} workers")

  @property
  def num_replicas(self):
    """Replicas in the whole job: each computes one gradient per micro-batch."""
    return self.num_workers * self.replicas_per_worker

  @property
  def synchronous(self):
    """Whether every update averages the gradients of all replicas."""
    return self.backend != "parameter_server"

  @property
  def replicas_per_update(self):
    """Replicas whose gradients one update averages.

    All of them when synchronous; with parameter servers each worker
    applies its own updates, so only its replicas.
    """
    return self.num_replicas if self.synchronous else self.replicas_per_worker

  def replica_batch_size(self, global_batch_size, accumulation_steps=1,
                         flag="global_batch_size"):
    """The examples one replica reads per update (k micro-batches).

    Args:
      global_batch_size: examples per update, summed over the whole job.
      accumulation_steps: micro-batches per update.
      flag: the name to use in error messages.

    Returns:
      global_batch_size / replicas_per_update; a multiple of
      accumulation_steps.

    Raises:
      ValueError: naming the nearest valid global batch sizes.
    """
    if global_batch_size is None or int(global_batch_size) < 1:
      raise errors.ConfigError(f"{flag} must be a positive integer, got "
                               f"{global_batch_size!r}")
    if int(accumulation_steps) < 1:
      raise errors.ConfigError("accumulation_steps must be >= 1, got "
                               f"{accumulation_steps!r}")
    divisor = self.replicas_per_update * int(accumulation_steps)
    if global_batch_size % divisor:
      lower = max(divisor, global_batch_size // divisor * divisor)
      upper = (global_batch_size // divisor + 1) * divisor
      raise errors.ConfigError(
          f"{flag}={global_batch_size} does not divide into "
          f"{self.replicas_per_update} replica(s) x {accumulation_steps} "
          f"accumulation step(s) = {divisor} "
          f"({self.num_workers} worker(s) x {self.replicas_per_worker} "
          "replica(s) each); "
          f"use a multiple of {divisor}, e.g. {lower} or {upper}")
    return global_batch_size // self.replicas_per_update


def local(replicas_per_worker=1, backend="none"):
  """A single process, possibly with several replicas (`mirrored`)."""
  return Topology(backend=backend, replicas_per_worker=replicas_per_worker)


def read_tf_config(environ=None):
  """Parses TF_CONFIG, raising an error that says what a valid one looks like."""
  environ = os.environ if environ is None else environ
  example = ('{"cluster": {"worker": ["host1:2222", "host2:2222"]}, '
             '"task": {"type": "worker", "index": 0}}')
  raw = environ.get("TF_CONFIG")
  if not raw:
    raise TopologyError("this distribution needs TF_CONFIG describing the "
                        f"cluster, e.g. TF_CONFIG='{example}' (tools/launch.py "
                        "sets it for local jobs)")
  try:
    config = json.loads(raw)
  except json.JSONDecodeError as e:
    raise TopologyError(f"TF_CONFIG is not valid JSON ({e}); expected e.g. "
                        f"{example}") from None
  cluster = config.get("cluster") if isinstance(config, dict) else None
  task = config.get("task") if isinstance(config, dict) else None
  if not isinstance(cluster, dict) or not isinstance(task, dict):
    raise TopologyError("TF_CONFIG needs a 'cluster' dict and a 'task' dict, "
                        f"e.g. {example}")
  task_type, index = task.get("type"), task.get("index")
  if task_type not in cluster:
    raise TopologyError(f"TF_CONFIG task type {task_type!r} is not a job of "
                        f"the cluster (jobs: {', '.join(sorted(cluster))})")
  if not isinstance(index, int) or not 0 <= index < len(cluster[task_type]):
    raise TopologyError(
        f"TF_CONFIG task index {index!r} is outside the cluster: job "
        f"{task_type!r} has {len(cluster[task_type])} task(s), valid indices "
        f"0..{len(cluster[task_type]) - 1}")
  return cluster, task_type, index


def from_tf_config(backend, environ=None):
  """The topology of a TF_CONFIG worker (multi_worker_mirrored, parameter_server).

  Workers are the chief (if any) followed by the `worker` tasks, so indices
  are dense; parameter servers and evaluators compute no gradients.
  """
  cluster, task_type, index = read_tf_config(environ)
  if backend == "parameter_server" and "ps" not in cluster:
    raise TopologyError("distribution=parameter_server needs a 'ps' job in "
                        "TF_CONFIG's cluster")
  if backend == "multi_worker_mirrored" and "ps" in cluster:
    raise TopologyError("distribution=multi_worker_mirrored takes a cluster of "
                        "'chief'/'worker' tasks only; TF_CONFIG has a 'ps' job "
                        "(use distribution=parameter_server)")
  chiefs = len(cluster.get("chief", []))
  num_workers = chiefs + len(cluster.get("worker", []))
  if task_type in ("chief", "worker"):
    worker_index = index if task_type == "chief" else chiefs + index
  else:
    worker_index = 0
  return Topology(backend=backend, num_workers=max(num_workers, 1),
                  worker_index=worker_index,
                  is_chief=(task_type == "chief" or
                            (chiefs == 0 and task_type == "worker" and
                             index == 0)))


def horovod_launched(environ=None):
  """Whether horovodrun (or mpirun) started this process."""
  environ = os.environ if environ is None else environ
  return any(k in environ for k in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK",
                                    "PMI_RANK"))


def from_horovod(hvd):
  """The topology of an initialised Horovod rank."""
  return Topology(backend="horovod", num_workers=hvd.size(),
                  worker_index=hvd.rank(), is_chief=hvd.rank() == 0,
                  local_rank=hvd.local_rank(), local_size=hvd.local_size())

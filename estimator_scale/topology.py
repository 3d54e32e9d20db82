"""Who this process is in the job; only backends read the environment."""
import dataclasses
from typing import Any

from estimator_scale import errors
from estimator_scale.backends import names

TopologyError = errors.TopologyError
"""Kept here too: the modules that read the environment raise it by this name."""


def _local_backend():
  return names.get("none")


@dataclasses.dataclass(frozen=True)
class Topology:
  """An immutable description of this process's place in the job.

  Attributes:
    backend: the `Backend` running the job (default: `backends.get("none")`).
    num_workers: processes computing gradients, the chief included.
    worker_index: this process's index among them, 0-based.
    replicas_per_worker: model replicas inside one worker.
    is_chief: whether this process writes checkpoints, summaries and exports.
    local_rank, local_size: place and workers on this host (Horovod).
  """
  backend: Any = dataclasses.field(default_factory=_local_backend)
  num_workers: int = 1
  worker_index: int = 0
  replicas_per_worker: int = 1
  is_chief: bool = True
  local_rank: int = 0
  local_size: int = 1

  def __post_init__(self):
    if isinstance(self.backend, str):
      raise TopologyError(
          f"Topology(backend={self.backend!r}) takes a Backend object, not a "
          "name: backends.get(name), or build_run_config(...).topology")
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
    return self.backend.synchronous

  @property
  def replicas_per_update(self):
    """Replicas one update averages: all if synchronous, else this worker's."""
    return self.num_replicas if self.synchronous else self.replicas_per_worker

  def replica_batch_size(self, global_batch_size, accumulation_steps=1,
                         flag="global_batch_size"):
    """The examples one replica reads per update (k micro-batches).

    `global_batch_size` sums over the whole job on every backend; with async
    ps, `global_step` advances workers times per global batch.

    Returns global_batch_size / num_replicas, a multiple of
    `accumulation_steps`; raises ConfigError naming the nearest valid sizes
    (`flag`: the name the message gives).
    """
    if global_batch_size is None or int(global_batch_size) < 1:
      raise errors.ConfigError(f"{flag} must be a positive integer, got "
                               f"{global_batch_size!r}")
    if int(accumulation_steps) < 1:
      raise errors.ConfigError("accumulation_steps must be >= 1, got "
                               f"{accumulation_steps!r}")
    divisor = self.num_replicas * int(accumulation_steps)
    if global_batch_size % divisor:
      lower = max(divisor, global_batch_size // divisor * divisor)
      upper = (global_batch_size // divisor + 1) * divisor
      raise errors.ConfigError(
          f"{flag}={global_batch_size} does not divide into "
          f"{self.num_replicas} replica(s) x {accumulation_steps} "
          f"accumulation step(s) = {divisor} "
          f"({self.num_workers} worker(s) x {self.replicas_per_worker} "
          "replica(s) each); "
          f"use a multiple of {divisor}, e.g. {lower} or {upper}")
    return global_batch_size // self.num_replicas

  def examples_per_update(self, global_batch_size):
    """Examples one `global_step` averages (async: global batch / workers)."""
    return global_batch_size * self.replicas_per_update // self.num_replicas

  def describe(self):
    """This topology in one line, as messages name it."""
    return (f"topology(backend={self.backend.name!r}, "
            f"synchronous={self.synchronous}, "
            f"num_workers={self.num_workers}, "
            f"worker_index={self.worker_index}, "
            f"replicas_per_worker={self.replicas_per_worker}, "
            f"is_chief={self.is_chief})")

  def differences(self, other):
    """The names of what `other` says otherwise about the job and this
    process's place in it (local_rank/local_size only place it on its host)."""
    return [name for name, mine, theirs in (
        ("backend", self.backend.name, other.backend.name),
        ("synchronous", self.synchronous, other.synchronous),
        ("num_workers", self.num_workers, other.num_workers),
        ("worker_index", self.worker_index, other.worker_index),
        ("replicas_per_worker", self.replicas_per_worker,
         other.replicas_per_worker),
        ("is_chief", self.is_chief, other.is_chief)) if mine != theirs]

  def require_estimators(self, estimators, given):
    """Refuses this topology where it is not the Estimator's.

    Args:
      estimators: the Estimator's `Topology`.
      given: the message's start ("build_train_op was given").

    Raises:
      ConfigError: naming both topologies and what differs.
    """
    differ = self.differences(estimators)
    if differ:
      raise errors.ConfigError(
          f"{given} {self.describe()} but the Estimator runs "
          f"{estimators.describe()} ({', '.join(differ)} differ): leave "
          "topology out to take the Estimator's, or pass estimator.topology")

"""Who this process is in the job: the one source of truth for "how many of us".

Sharding, lr scaling, AdaScale's S and chief-only side effects all read a
`Topology`. Its backend read it from the environment (TF_CONFIG, Horovod);
no other module parses TF_CONFIG or asks Horovod for its rank.
"""
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
    backend: the `backends.base.Backend` that runs the job (default: one
      process, `backends.get("none")`).
    num_workers: processes that compute gradients (Horovod ranks or TF_CONFIG
      workers, the chief included).
    worker_index: this process's index among them, 0-based.
    replicas_per_worker: model replicas inside one worker (`mirrored` devices).
    is_chief: whether this process writes checkpoints, summaries and exports.
    local_rank: index among the workers on this host (Horovod only).
    local_size: workers on this host.
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


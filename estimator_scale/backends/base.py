"""The Backend interface, its ScaleConfig, session configs and thread pool."""
import dataclasses
import os
from typing import Any, List

from absl import logging
import tensorflow as tf

from estimator_scale import errors
from estimator_scale import topology as topology_lib


@dataclasses.dataclass
class ScaleConfig:
  """What a backend needs: the RunConfig, who we are, and how to coordinate."""
  run_config: tf.estimator.RunConfig
  topology: topology_lib.Topology
  coordinator: Any
  hooks: List[Any] = dataclasses.field(default_factory=list)
  full_checkpoint_every: int = 1
  """Saves per full checkpoint (`embeddings.deltas`)."""


STRATEGY_REFUSAL = (
    "tf.distribute (TF 2.15) offers no allreduce compression: its "
    "CommunicationOptions set only bytes_per_pack, timeout_seconds and the "
    "collective implementation")


class Backend:
  """One way to run a job; backends compare equal by name."""

  name = None
  compressions = ("none",)
  """The `allreduce_compression` values this backend carries out."""
  compression_refusal = ""
  """Why the others are refused, for the message."""
  synchronous = True
  """Whether every update averages the gradients of all replicas."""
  sparse_exchanges = ("auto",)
  """The `sparse_exchange` values this backend carries out; only "auto"
  where the exchange of sparse gradients is not the framework's to choose
  (tf.distribute's, or none)."""
  tables_on_ps = False
  """Whether dynamic tables split over the job's ps tasks by id."""
  listeners_refusal = ""
  """Why Estimator runs no saving listeners under this backend, if so."""

  def __eq__(self, other):
    return isinstance(other, Backend) and other.name == self.name

  def __hash__(self):
    return hash(self.name)

  def __repr__(self):
    return f"<backend {self.name}>"

  def build(self, run_config_kwargs, model_dir, replicas, intra_op_threads):
    """The ScaleConfig of this process (`replicas`: mirrored's only)."""
    raise NotImplementedError

  def make_reducer(self, compression="none", sparse_exchange="auto"):
    """The reducer `train_ops.pipeline` averages gradients with.

    Raises:
      ConfigError: an option this backend does not offer.
    """
    self.check_offers(compression, sparse_exchange)
    return self._reducer(compression, sparse_exchange)

  def _reducer(self, compression, sparse_exchange):
    """`make_reducer` after its arguments were checked."""
    raise NotImplementedError

  def check_offers(self, compression="none", sparse_exchange="auto"):
    """Raises ConfigError when this backend cannot reduce as asked."""
    if compression not in self.compressions:
      raise errors.ConfigError(
          f"allreduce_compression={compression!r} is not available with "
          f"distribution={self.name!r}: {self.compression_refusal}; valid "
          f"there: {', '.join(self.compressions)}")
    if sparse_exchange not in self.sparse_exchanges:
      raise errors.ConfigError(
          f"sparse_exchange={sparse_exchange!r} is not available with "
          f"distribution={self.name!r}; valid there: "
          f"{', '.join(self.sparse_exchanges)}")

  def replicas_in_sync(self, topology):
    """Replicas a tf.distribute strategy runs in sync (1 without one)."""
    del topology
    return 1

  def synchronized(self):
    """This backend with one update averaging every worker's gradients."""
    raise errors.ConfigError(
        f"ps_sync=True applies to distribution='parameter_server' only; "
        f"distribution={self.name!r} is "
        f"{'synchronous' if self.synchronous else 'asynchronous'} already")

  def elastic_requested(self):
    """Whether this process is a rank of an elastic job (Horovod's driver)."""
    return False


def session_config(intra_op_threads=0, cpu_devices=None, gpu_device=None):
  # One pass of graph optimizations, as in the Estimator's default config:
  # TensorFlow's default of two costs seconds on each new graph of many
  # tables (every evaluation, restart and fetch signature).
  config = tf.compat.v1.ConfigProto(
      intra_op_parallelism_threads=intra_op_threads, allow_soft_placement=True)
  rewrites = config.graph_options.rewrite_options
  rewrites.meta_optimizer_iterations = rewrites.ONE
  if cpu_devices:
    config.device_count["CPU"] = cpu_devices
  if gpu_device is not None:
    config.gpu_options.visible_device_list = str(gpu_device)
    config.gpu_options.allow_growth = True
  return config


def pin_threads(intra_op_threads, requested):
  """Sizes this process's intra-op pool (0: all cores) on the context, since
  TF sizes it before reading the session config."""
  threading = tf.config.threading
  try:
    threading.set_intra_op_parallelism_threads(intra_op_threads)
    return
  except RuntimeError:  # the context has started; its pools are fixed
    running = threading.get_intra_op_parallelism_threads()
  if running == intra_op_threads:
    return
  message = (f"intra_op_threads={intra_op_threads} cannot apply: this "
             "process's TensorFlow thread pool already runs with "
             f"{running or 'all cores'}; build the run config before any "
             "TensorFlow op runs, or in a new process")
  if requested:
    raise errors.ConfigError(message)
  logging.warning(message)


def forbid_tf_config(distribution):
  """A single-process backend refuses a TF_CONFIG it would silently ignore."""
  if os.environ.get("TF_CONFIG"):
    raise topology_lib.TopologyError(
        f"TF_CONFIG is set but distribution={distribution!r} ignores it; use "
        "distribution='multi_worker_mirrored' or 'parameter_server', or unset "
        "TF_CONFIG")


def require_model_dir(distribution, model_dir):
  if not model_dir:
    raise errors.ConfigError(
        f"distribution={distribution!r} needs a model_dir: all "
        "workers must name the same checkpoint directory")

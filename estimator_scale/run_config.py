"""`build_run_config(distribution=...)`: RunConfig, Topology and hooks per backend.

This module (with `coordination.py` and `train_ops/reduce.py`) is the only
code that knows which backend runs; everything else reads the Topology.
"""
import dataclasses
import os
from typing import Any, List

from absl import logging
import tensorflow as tf

from estimator_scale import coordination
from estimator_scale import topology as topology_lib


@dataclasses.dataclass
class ScaleConfig:
  """What a backend needs: the RunConfig, who we are, and how to coordinate."""
  run_config: tf.estimator.RunConfig
  topology: topology_lib.Topology
  coordinator: Any
  hooks: List[Any] = dataclasses.field(default_factory=list)


def _session_config(intra_op_threads=0, cpu_devices=None, gpu_device=None):
  config = tf.compat.v1.ConfigProto(
      intra_op_parallelism_threads=intra_op_threads, allow_soft_placement=True)
  if cpu_devices:
    config.device_count["CPU"] = cpu_devices
  if gpu_device is not None:
    config.gpu_options.visible_device_list = str(gpu_device)
    config.gpu_options.allow_growth = True
  return config


def _pin_threads(intra_op_threads, requested):
  """Sizes this process's intra-op thread pool, which every session shares.

  TensorFlow sizes it once, when the first device is made, and Estimator
  makes one (eager) before it reads the session config, so a session config
  alone is ignored: the size is set on the context before it starts.

  Args:
    intra_op_threads: the pool size (0: TensorFlow's default, all cores).
    requested: whether the user asked for this size (then a pool already
      running with another size is an error, not a warning).
  """
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
    raise ValueError(message)
  logging.warning(message)


def _forbid_tf_config(distribution):
  if os.environ.get("TF_CONFIG"):
    raise topology_lib.TopologyError(
        f"TF_CONFIG is set but --distribution={distribution} ignores it; use "
        "--distribution=multi_worker_mirrored or parameter_server, or unset "
        "TF_CONFIG")


def _mirrored(replicas):
  """N replicas in one process: GPUs when present, else N virtual CPUs."""
  gpus = tf.config.list_physical_devices("GPU")
  replicas = replicas or len(gpus) or 2
  if gpus:
    if replicas > len(gpus):
      raise ValueError(f"--replicas={replicas} exceeds the {len(gpus)} GPUs")
    devices = [f"/gpu:{i}" for i in range(replicas)]
    session = _session_config()
  else:
    devices = [f"/cpu:{i}" for i in range(replicas)]
    # Graph-mode sessions only see N CPU devices when asked for them.
    session = _session_config(cpu_devices=replicas)
  strategy = tf.distribute.MirroredStrategy(devices=devices)
  return strategy, session, replicas


def _import_horovod():
  if not topology_lib.horovod_launched():
    raise topology_lib.TopologyError(
        "--distribution=horovod needs the process to be started by horovodrun, "
        "e.g. horovodrun -np 2 -H localhost:2 python -m estimator_scale.train "
        "--distribution=horovod ...")
  try:
    import horovod.tensorflow as hvd  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise topology_lib.TopologyError(
        f"--distribution=horovod needs Horovod ({e}); install it with "
        "`make setup` (builds horovod==0.28.1 with Gloo)") from None
  return hvd


def build_run_config(distribution="none", model_dir=None, replicas=None,
                     save_checkpoints_steps=100, save_summary_steps=100,
                     log_step_count_steps=100, random_seed=None,
                     keep_checkpoint_max=5, intra_op_threads=None):
  """The RunConfig, Topology, coordinator and hooks for a distribution.

  Args:
    distribution: none | mirrored | multi_worker_mirrored | parameter_server
      | horovod.
    model_dir: where the chief writes checkpoints; shared by all workers
      (multi-node jobs need a shared file system or the same path on each).
    replicas: `mirrored` replicas in this process (default: GPUs, or 2 CPUs).
    save_checkpoints_steps, save_summary_steps, log_step_count_steps: as in
      RunConfig; step-based because collective ops and time-based saving can
      deadlock.
    random_seed: seed of the graph and of layer initializers (same on every
      worker).
    keep_checkpoint_max: checkpoints kept.
    intra_op_threads: threads per op in this process (default: all cores,
      or cores / ranks per host under Horovod).

  Returns:
    `ScaleConfig`.

  Raises:
    TopologyError: the environment cannot run this distribution; the message
      says what to do.
  """
  common = dict(model_dir=model_dir, tf_random_seed=random_seed,
                save_checkpoints_steps=save_checkpoints_steps,
                save_checkpoints_secs=None,
                save_summary_steps=save_summary_steps,
                log_step_count_steps=log_step_count_steps,
                keep_checkpoint_max=keep_checkpoint_max)
  if distribution != "horovod":
    _pin_threads(intra_op_threads or 0, requested=bool(intra_op_threads))
  if distribution == "none":
    _forbid_tf_config(distribution)
    topology = topology_lib.local()
    session = _session_config(intra_op_threads) if intra_op_threads else None
    return ScaleConfig(
        tf.estimator.RunConfig(session_config=session, **common),
        topology, coordination.LocalCoordinator(topology))
  if distribution == "mirrored":
    _forbid_tf_config(distribution)
    strategy, session, replicas = _mirrored(replicas)
    session.intra_op_parallelism_threads = intra_op_threads or 0
    topology = topology_lib.local(replicas, backend="mirrored")
    config = tf.estimator.RunConfig(train_distribute=strategy,
                                    session_config=session, **common)
    return ScaleConfig(config, topology, coordination.LocalCoordinator(topology))
  if distribution in ("multi_worker_mirrored", "parameter_server",
                      "horovod") and not model_dir:
    raise ValueError(f"--distribution={distribution} needs --model_dir: all "
                     "workers must name the same checkpoint directory")
  if distribution in ("multi_worker_mirrored", "parameter_server"):
    topology = topology_lib.from_tf_config(distribution)
    if distribution == "multi_worker_mirrored":
      strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()
      config = tf.estimator.RunConfig(
          train_distribute=strategy,
          session_config=_session_config(intra_op_threads or 0), **common)
    else:
      config = tf.estimator.RunConfig(
          session_config=_session_config(intra_op_threads or 0), **common)
    return ScaleConfig(config, topology,
                       coordination.ClusterCoordinator(topology))
  if distribution == "horovod":
    hvd = _import_horovod()
    hvd.init()
    topology = topology_lib.from_horovod(hvd)
    threads = intra_op_threads or max(
        1, (os.cpu_count() or 1) // topology.local_size)
    _pin_threads(threads, requested=bool(intra_op_threads))
    gpu = topology.local_rank if tf.config.list_physical_devices("GPU") else None
    if not topology.is_chief:
      common.update(save_checkpoints_steps=None, save_summary_steps=None,
                    log_step_count_steps=None)
    config = tf.estimator.RunConfig(
        session_config=_session_config(threads, gpu_device=gpu), **common)
    return ScaleConfig(config, topology,
                       coordination.HorovodCoordinator(topology, hvd),
                       hooks=[hvd.BroadcastGlobalVariablesHook(0)])
  raise topology_lib.TopologyError(
      f"--distribution={distribution!r} is unknown; valid: "
      f"{', '.join(topology_lib.BACKENDS)}")

"""`build_run_config(distribution=...)`: RunConfig, Topology and hooks per backend.

Each backend is one object in `backends/` (its RunConfig, coordinator and
reducer); this picks it and passes the settings every backend shares.
"""
from estimator_scale import backends
from estimator_scale import filesystems


def build_run_config(distribution="none", model_dir=None, replicas=None,
                     save_checkpoints_steps=100, save_summary_steps=100,
                     log_step_count_steps=100, random_seed=None,
                     keep_checkpoint_max=5, intra_op_threads=None):
  """The RunConfig, Topology, coordinator and hooks for a distribution.

  Args:
    distribution: none | mirrored | multi_worker_mirrored | parameter_server
      | horovod.
    model_dir: where the chief writes checkpoints. TF_CONFIG workers must
      share it (a shared file system, or object storage); Horovod ranks
      may each have their own, as only rank 0's is read.
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
    ConfigError: model_dir's scheme has no file system here
      (`filesystems.require`).
  """
  filesystems.require("model_dir", model_dir)
  common = dict(tf_random_seed=random_seed,
                save_checkpoints_steps=save_checkpoints_steps,
                save_checkpoints_secs=None,
                save_summary_steps=save_summary_steps,
                log_step_count_steps=log_step_count_steps,
                keep_checkpoint_max=keep_checkpoint_max)
  return backends.get(distribution).build(common, model_dir, replicas,
                                          intra_op_threads)

"""`build_run_config(distribution=...)`: RunConfig, Topology and hooks."""
from estimator_scale import backends
from estimator_scale import errors
from estimator_scale import filesystems
from estimator_scale import memory_limit


def build_run_config(distribution="none", model_dir=None, replicas=None,
                     save_checkpoints_steps=100, save_summary_steps=100,
                     log_step_count_steps=100, random_seed=None,
                     keep_checkpoint_max=5, intra_op_threads=None,
                     ps_sync=False, full_checkpoint_every=1):
  """The RunConfig, Topology, coordinator and hooks for a distribution.

  Args:
    distribution: none | mirrored | multi_worker_mirrored | parameter_server
      | horovod.
    model_dir: checkpoint directory; TF_CONFIG workers must share it.
    replicas: `mirrored` replicas in this process (default: GPUs, or 2 CPUs).
    save_checkpoints_steps, save_summary_steps, log_step_count_steps: as in
      RunConfig; by step, as time-based saving can deadlock collectives.
    random_seed: graph and initializer seed (same on every worker).
    keep_checkpoint_max: checkpoints kept.
    intra_op_threads: threads per op (default: cores per process).
    ps_sync: parameter_server only: one averaged update applied by the chief.
    full_checkpoint_every: one save in this many is full; the others write
      the tables' changed rows only.

  Returns:
    `ScaleConfig`.

  Raises:
    TopologyError: the environment cannot run this distribution.
    ConfigError: no file system for model_dir, or ps_sync misused.
  """
  filesystems.require("model_dir", model_dir)
  # Before the backend starts: a parameter server serves from inside it.
  memory_limit.watch_for_oom_kill()
  common = dict(tf_random_seed=random_seed,
                save_checkpoints_steps=save_checkpoints_steps,
                save_checkpoints_secs=None,
                save_summary_steps=save_summary_steps,
                log_step_count_steps=log_step_count_steps,
                keep_checkpoint_max=keep_checkpoint_max)
  backend = backends.get(distribution)
  _check_full_checkpoint_every(full_checkpoint_every, distribution, ps_sync)
  if ps_sync:
    backend = backend.synchronized()
  scale_config = backend.build(common, model_dir, replicas, intra_op_threads)
  scale_config.full_checkpoint_every = full_checkpoint_every
  if _synchronised_by_the_factory(scale_config):
    scale_config.run_config = scale_config.run_config.replace(
        device_fn=TrainedDirectly(distribution))
  return scale_config


def _check_full_checkpoint_every(full_every, distribution, ps_sync):
  if not isinstance(full_every, int) or full_every < 1:
    raise errors.ConfigError(
        f"full_checkpoint_every={full_every!r}: give a whole number >= 1 (1: "
        "every save is full; K: one save in K is, the others save the rows "
        "changed since the save before)")
  # Asynchronous workers each update the tables, where the chief that
  # saves cannot see which rows they changed.
  where = {"none": "", "horovod": "", "parameter_server": " without ps_sync"}
  refused = distribution not in where or (
      distribution == "parameter_server" and not ps_sync)
  if full_every > 1 and refused:
    raise errors.ConfigError(
        f"full_checkpoint_every={full_every} saves deltas of the tables "
        "of one process, of Horovod ranks or of synchronous "
        f"parameter servers; distribution={distribution!r}"
        f"{where.get(distribution, '')} saves "
        "every row at every save: use full_checkpoint_every=1 there")


def _synchronised_by_the_factory(scale_config):
  """Whether only the framework's train op and hooks keep workers in step."""
  topology = scale_config.topology
  return (topology.synchronous and topology.num_workers > 1 and
          scale_config.run_config.train_distribute is None)


class TrainedDirectly:
  """The device function refusing `Estimator.train` under Horovod or ps_sync,
  where it would train workers unsynchronised without error."""

  def __init__(self, distribution):
    self.distribution = distribution

  def __call__(self, op):
    raise errors.ConfigError(
        f"this Estimator was made with build_run_config({self.distribution!r})"
        ".run_config and is trained with its own train(): its workers would "
        "train unsynchronised. Train it through es.make_estimator(estimator, "
        "scale_config=scale_config), which adds what synchronises them")


def for_the_factory(run_config):
  """`run_config` without the `TrainedDirectly` guard."""
  if isinstance(run_config.device_fn, TrainedDirectly):
    return run_config.replace(device_fn=None)
  return run_config

"""`horovod`: ranks started by horovodrun, gradients allreduced by Horovod."""
import os

import tensorflow as tf

from estimator_scale import choices
from estimator_scale.backends import base
from estimator_scale.backends.horovod import coordinator
from estimator_scale.backends.horovod import elastic
from estimator_scale.backends.horovod import faults
from estimator_scale.backends.horovod import ranks
from estimator_scale.backends.horovod import reducer
from estimator_scale.backends.horovod import stop
from estimator_scale.embeddings import shard_checkpoints


class Horovod(base.Backend):
  """See base class; holds the job's stop flag and its elastic job, if any."""

  name = "horovod"
  compressions = ("none", "fp16")
  sparse_exchanges = choices.SPARSE_EXCHANGES

  def __init__(self):
    self.stop_flag = stop.StopFlag()
    self.elastic_job = elastic.attempting()

  def build(self, run_config_kwargs, model_dir, replicas, intra_op_threads):
    """See base class."""
    base.require_model_dir(self.name, model_dir)
    hvd = ranks.init_horovod()
    topology, threads = ranks.bind_rank(hvd, self, intra_op_threads)
    gpu = topology.local_rank if tf.config.list_physical_devices("GPU") else None
    kwargs = dict(run_config_kwargs)
    job = self.elastic_job
    if job:  # its commits are rank 0's checkpoints
      kwargs.update(save_checkpoints_steps=job.commit_every_n_steps)
    save_steps = kwargs.get("save_checkpoints_steps")  # rank 0's, and commits
    if not topology.is_chief:
      kwargs.update(save_checkpoints_steps=None, save_summary_steps=None,
                    log_step_count_steps=None)
    config = tf.estimator.RunConfig(
        session_config=base.session_config(threads, gpu_device=gpu),
        model_dir=model_dir, **kwargs)
    coord = coordinator.HorovodCoordinator(topology, hvd, self.stop_flag)
    # The sharded tables' rows are each rank's own: not broadcast, saved by
    # every rank as rank 0 checkpoints.
    hooks = [hvd.BroadcastGlobalVariablesHook(0),
             shard_checkpoints.ShardCheckpointHook(model_dir, save_steps,
                                                   hvd)]
    if job:  # a lost rank is Horovod's error, which restarts the job
      hooks += job.attach(model_dir, topology)
      return base.ScaleConfig(config, topology, coord, hooks=hooks)
    # As an elastic restart does (`attach`); the other ranks read the
    # checkpoint state only after the allgather below.
    if topology.is_chief:
      shard_checkpoints.resume_where_tables_were_merged(model_dir)
    if topology.num_workers > 1:
      coord = faults.NamingLostRanks(coord,
                                     faults.Peers.exchange(hvd, os.environ),
                                     faults.stall_seconds(os.environ))
    return base.ScaleConfig(config, topology, coord, hooks=hooks)

  def elastic_requested(self):
    """See base class."""
    return ranks.elastic_requested()

  def _reducer(self, compression, sparse_exchange):
    """See base class."""
    return reducer.HorovodReducer(ranks.import_horovod(), compression,
                                  self.stop_flag, sparse_exchange)

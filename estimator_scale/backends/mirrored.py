"""`mirrored`: N replicas in one process (GPUs, else virtual CPUs)."""
import tensorflow as tf

from estimator_scale import errors
from estimator_scale import topology as topology_lib
from estimator_scale.backends import base
from estimator_scale.backends import coordinator
from estimator_scale.backends import reducers


class Mirrored(base.Backend):
  """See base class."""

  name = "mirrored"
  compression_refusal = base.STRATEGY_REFUSAL

  def build(self, run_config_kwargs, model_dir, replicas, intra_op_threads):
    """See base class."""
    base.pin_threads(intra_op_threads or 0, requested=bool(intra_op_threads))
    base.forbid_tf_config(self.name)
    gpus = tf.config.list_physical_devices("GPU")
    replicas = replicas or len(gpus) or 2
    if gpus:
      if replicas > len(gpus):
        raise errors.ConfigError(
            f"replicas={replicas} exceeds the {len(gpus)} GPUs")
      devices = [f"/gpu:{i}" for i in range(replicas)]
      session = base.session_config()
    else:
      devices = [f"/cpu:{i}" for i in range(replicas)]
      # Graph-mode sessions only see N CPU devices when asked for them.
      session = base.session_config(cpu_devices=replicas)
    session.intra_op_parallelism_threads = intra_op_threads or 0
    topology = topology_lib.Topology(backend=self,
                                     replicas_per_worker=replicas)
    config = tf.estimator.RunConfig(
        train_distribute=tf.distribute.MirroredStrategy(devices=devices),
        session_config=session, model_dir=model_dir, **run_config_kwargs)
    return base.ScaleConfig(config, topology,
                            coordinator.Coordinator(topology))

  def _reducer(self, compression, sparse_exchange):
    """See base class."""
    del compression, sparse_exchange  # only the defaults pass the checks
    return reducers.StrategyReducer()

  def replicas_in_sync(self, topology):
    """See base class."""
    return topology.num_replicas

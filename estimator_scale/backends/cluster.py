"""TF_CONFIG clusters: `multi_worker_mirrored` and `parameter_server`."""
import tensorflow as tf

from estimator_scale import coordination
from estimator_scale import topology as topology_lib
from estimator_scale.backends import base
from estimator_scale.train_ops import reduce


class MultiWorkerMirrored(base.Backend):
  """Synchronous workers; gradients all-reduced by collective ops."""

  name = "multi_worker_mirrored"
  compression_refusal = base.STRATEGY_REFUSAL

  def build(self, run_config_kwargs, model_dir, replicas, intra_op_threads):
    """See base class."""
    return _cluster(
        self.name, run_config_kwargs, model_dir, intra_op_threads,
        tf.distribute.experimental.MultiWorkerMirroredStrategy)

  def _reducer(self, compression):
    """See base class."""
    del compression  # only "none" passes check_compression here
    return reduce.StrategyReducer()

  def replicas_in_sync(self, topology):
    """See base class."""
    return topology.num_replicas


class ParameterServer(base.Backend):
  """Asynchronous workers, each applying its own updates on the servers."""

  name = "parameter_server"
  compression_refusal = ("workers send their gradients to the parameter "
                         "servers, not through an allreduce")

  def build(self, run_config_kwargs, model_dir, replicas, intra_op_threads):
    """See base class."""
    return _cluster(self.name, run_config_kwargs, model_dir, intra_op_threads)

  def _reducer(self, compression):
    """See base class."""
    del compression  # only "none" passes check_compression here
    return reduce.LocalReducer()


def _cluster(name, run_config_kwargs, model_dir, intra_op_threads,
             make_strategy=None):
  """A TF_CONFIG worker's ScaleConfig; TF_CONFIG is checked (with an error
  that shows a valid one) before TensorFlow's strategy parses it."""
  base.pin_threads(intra_op_threads or 0, requested=bool(intra_op_threads))
  base.require_model_dir(name, model_dir)
  topology = topology_lib.from_tf_config(name)
  config = tf.estimator.RunConfig(
      session_config=base.session_config(intra_op_threads or 0),
      model_dir=model_dir,
      train_distribute=make_strategy() if make_strategy else None,
      **run_config_kwargs)
  return base.ScaleConfig(config, topology,
                          coordination.ClusterCoordinator(topology))

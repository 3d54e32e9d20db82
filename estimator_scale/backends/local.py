"""`none`: one process, one replica."""
import tensorflow as tf

from estimator_scale import topology as topology_lib
from estimator_scale.backends import base
from estimator_scale.backends import coordinator
from estimator_scale.backends import reducers


class Local(base.Backend):
  """See base class."""

  name = "none"
  compression_refusal = "one process has no allreduce to compress"

  def build(self, run_config_kwargs, model_dir, replicas, intra_op_threads):
    """See base class."""
    base.pin_threads(intra_op_threads or 0, requested=bool(intra_op_threads))
    base.forbid_tf_config(self.name)
    topology = topology_lib.Topology(backend=self)
    session = (base.session_config(intra_op_threads) if intra_op_threads
               else None)
    return base.ScaleConfig(
        tf.estimator.RunConfig(session_config=session, model_dir=model_dir,
                               **run_config_kwargs),
        topology, coordinator.Coordinator(topology))

  def _reducer(self, compression, sparse_exchange):
    """See base class."""
    del compression, sparse_exchange  # only the defaults pass the checks
    return reducers.LocalReducer()

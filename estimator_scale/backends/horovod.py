"""`horovod`: ranks started by horovodrun, gradients allreduced by Horovod."""
import os

import tensorflow as tf

from estimator_scale import coordination
from estimator_scale import topology as topology_lib
from estimator_scale.backends import base
from estimator_scale.train_ops import reduce


class Horovod(base.Backend):
  """See base class."""

  name = "horovod"

  def build(self, run_config_kwargs, model_dir, replicas, intra_op_threads):
    """See base class."""
    base.require_model_dir(self.name, model_dir)
    hvd = _import_horovod()
    hvd.init()
    topology = topology_lib.from_horovod(hvd)
    threads = intra_op_threads or max(
        1, (os.cpu_count() or 1) // topology.local_size)
    base.pin_threads(threads, requested=bool(intra_op_threads))
    gpu = topology.local_rank if tf.config.list_physical_devices("GPU") else None
    kwargs = dict(run_config_kwargs)
    if not topology.is_chief:
      kwargs.update(save_checkpoints_steps=None, save_summary_steps=None,
                    log_step_count_steps=None)
    config = tf.estimator.RunConfig(
        session_config=base.session_config(threads, gpu_device=gpu),
        model_dir=model_dir, **kwargs)
    return base.ScaleConfig(config, topology,
                            coordination.HorovodCoordinator(topology, hvd),
                            hooks=[hvd.BroadcastGlobalVariablesHook(0)])

  def make_reducer(self):
    """See base class."""
    return reduce.HorovodReducer(_import_horovod())


def _import_horovod():
  if not topology_lib.horovod_launched():
    raise topology_lib.TopologyError(
        "distribution='horovod' needs the process to be started by horovodrun, "
        "e.g. horovodrun -np 2 -H localhost:2 python -m estimator_scale.train "
        "--distribution=horovod ...")
  try:
    import horovod.tensorflow as hvd  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise topology_lib.TopologyError(
        f"distribution='horovod' needs Horovod ({e}); install it with "
        "`make setup` (builds horovod==0.28.1 with Gloo)") from None
  return hvd

"""`horovod`: ranks started by horovodrun, gradients allreduced by Horovod."""
import os

import tensorflow as tf

from estimator_scale import coordination
from estimator_scale import topology as topology_lib
from estimator_scale.backends import base
from estimator_scale.train_ops import reduce

HOROVOD_DEFAULTS = {"HOROVOD_CYCLE_TIME": "5"}
"""Horovod settings this framework starts ranks with unless the user's
environment sets them. The background thread wakes every cycle to negotiate
ready tensors; on a host whose cores all compute (one thread per rank), the
1 ms default wakes it often enough to take CPU from the ranks, and an update
allreduces once (the reducer folds everything into one group), so a longer
cycle costs at most a few ms per update. Measured by tools/horovod_knobs.py;
docs/PERFORMANCE.md has what each setting bought."""


def apply_defaults(environ):
  """Sets `HOROVOD_DEFAULTS` in `environ` where the user has not (before
  hvd.init(), which reads them)."""
  for key, value in HOROVOD_DEFAULTS.items():
    environ.setdefault(key, value)


class Horovod(base.Backend):
  """See base class."""

  name = "horovod"
  compressions = ("none", "fp16")
  compression_refusal = (
      "Horovod 0.28.1's allreduce has no bfloat16 type (it carries uint8, "
      "int8, int32, int64, float16, float32 and float64)")

  def build(self, run_config_kwargs, model_dir, replicas, intra_op_threads):
    """See base class."""
    base.require_model_dir(self.name, model_dir)
    hvd = _import_horovod()
    apply_defaults(os.environ)
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

  def _reducer(self, compression):
    """See base class."""
    return reduce.HorovodReducer(_import_horovod(), compression)


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

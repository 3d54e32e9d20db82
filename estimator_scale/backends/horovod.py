"""`horovod`: ranks started by horovodrun, gradients allreduced by Horovod."""
import os

from absl import logging
import tensorflow as tf

from estimator_scale import coordination
from estimator_scale import errors
from estimator_scale import topology as topology_lib
from estimator_scale.backends import base
from estimator_scale.train_ops import reduce

HOROVOD_DEFAULTS = {"HOROVOD_CYCLE_TIME": "5"}
"""Horovod settings this framework starts ranks with unless the user's
environment sets them. The background thread wakes every cycle to negotiate
ready tensors; on a host whose cores all compute (one thread per rank), the
1 ms default wakes it often enough to take CPU from the ranks (unbound: 1.34x
one process against 1.55x at 5 ms), and an update allreduces once (the
reducer folds everything into one group), so a longer cycle costs at most a
few ms per update. With ranks bound to cores, 1-10 ms measure within 0.02x
of each other and 0.5 ms loses 5 %. Measured by tools/horovod_knobs.py;
docs/PERFORMANCE.md has what each setting bought."""


def apply_defaults(environ):
  """Sets `HOROVOD_DEFAULTS` in `environ` where the user has not (before
  hvd.init(), which reads them)."""
  for key, value in HOROVOD_DEFAULTS.items():
    environ.setdefault(key, value)


CORE_BINDING = "ESTIMATOR_SCALE_CORE_BINDING"
BINDINGS = ("cores", "none")


def rank_cores(available, local_rank, local_size):
  """The cores a rank binds to: its even, disjoint share of `available`.

  None where binding cannot help: one rank on the host, or more ranks than
  cores (each would get none).
  """
  cores = sorted(available)
  share = len(cores) // local_size
  if local_size < 2 or share < 1:
    return None
  return cores[local_rank * share:(local_rank + 1) * share]


def bind_to_cores(topology, environ, threads=None):
  """Binds this rank to its share of the cores, as mpirun --bind-to does.

  Unbound, the OS moves each rank's compute thread, Horovod's background
  thread and Gloo's threads across all cores, so ranks that each could own a
  core take turns on all of them; bound, a rank's Horovod threads run on its
  own core between its updates. On 2 cores, 2 ranks of 1 thread went from
  about 1.6x one process to 1.7x (docs/PERFORMANCE.md, "Horovod knobs").
  A process the user or launcher already bound (an affinity narrower than
  the machine) is left as it is, as is a rank asking for more intra-op
  threads than its share; `ESTIMATOR_SCALE_CORE_BINDING=none` turns binding
  off.

  Args:
    topology: this rank's place (local_rank, local_size).
    environ: where `ESTIMATOR_SCALE_CORE_BINDING` is read.
    threads: the intra-op threads the user asked for, if any.

  Returns:
    The cores bound to, or None.
  """
  mode = environ.get(CORE_BINDING, "cores")
  if mode not in BINDINGS:
    raise errors.ConfigError(
        f"{CORE_BINDING}={mode!r} is not a core binding; valid: "
        f"{', '.join(BINDINGS)}")
  available = os.sched_getaffinity(0)
  if mode == "none" or len(available) < (os.cpu_count() or 1):
    return None
  cores = rank_cores(available, topology.local_rank, topology.local_size)
  if cores is None:
    return None
  if threads and threads > len(cores):
    logging.warning(
        "Horovod rank %d not bound to cores: intra_op_threads=%d is more "
        "than its share of this host (%d of %d cores for %d ranks)",
        topology.worker_index, threads, len(cores), len(available),
        topology.local_size)
    return None
  # Every thread: Horovod's background and Gloo's threads exist already.
  for thread in os.listdir("/proc/self/task"):
    try:
      os.sched_setaffinity(int(thread), cores)
    except OSError:  # a thread that ended since the listing
      pass
  if topology.is_chief:  # one line per job, as every rank's log is shown
    logging.info("Horovod ranks bound to %d core(s) each (%s=none turns "
                 "this off); rank 0: cores %s", len(cores), CORE_BINDING,
                 cores)
  return cores


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
    cores = bind_to_cores(topology, os.environ, intra_op_threads)
    threads = intra_op_threads or (len(cores) if cores else max(
        1, len(os.sched_getaffinity(0)) // topology.local_size))
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

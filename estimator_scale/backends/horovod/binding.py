"""Horovod's process-level settings: knobs' defaults (before `hvd.init()`),
core binding (right after)."""
import os

from absl import logging

from estimator_scale import environment
from estimator_scale import errors

HOROVOD_DEFAULTS = {"HOROVOD_CYCLE_TIME": "5"}
"""Horovod settings this framework starts ranks with unless the user's
environment sets them. The background thread wakes every cycle to negotiate
ready tensors; on a host whose cores all compute (one thread per rank), the
1 ms default wakes it often enough to take CPU from the ranks, while an
update allreduces once (the reducer folds everything into one group), so a
longer cycle costs at most a few ms per update.
tools/bench/perf/horovod_knobs.py measures the choices; docs/BENCH.md
has what each bought."""


def apply_defaults(environ):
  """Sets `HOROVOD_DEFAULTS` in `environ` where the user has not."""
  for key, value in HOROVOD_DEFAULTS.items():
    environ.setdefault(key, value)


BINDINGS = ("cores", "none")


def rank_cores(available, local_rank, local_size):
  """A rank's even share of `available` cores; None where binding won't help."""
  cores = sorted(available)
  share = len(cores) // local_size
  if local_size < 2 or share < 1:
    return None
  return cores[local_rank * share:(local_rank + 1) * share]


def bind_to_cores(topology, environ, threads=None):
  """Binds this rank to its share of the cores, as mpirun --bind-to does;
  returns them, or None.

  A process already bound, or asking more `threads` than its share, is left
  alone; `environment.CORE_BINDING` set to none turns binding off.
  """
  mode = environ.get(environment.CORE_BINDING, "cores")
  if mode not in BINDINGS:
    raise errors.ConfigError(
        f"{environment.CORE_BINDING}={mode!r} is not a core binding; valid: "
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
                 "this off); rank 0: cores %s", len(cores),
                 environment.CORE_BINDING, cores)
  return cores

"""This process as a Horovod rank: started by horovodrun, initialised, bound."""
import ipaddress
import os
import socket
import sys

from estimator_scale import errors
from estimator_scale import topology as topology_lib
from estimator_scale.backends import base
from estimator_scale.backends import slurm
from estimator_scale.backends.horovod import binding
from estimator_scale.backends.horovod import faults
from estimator_scale.backends.horovod import srun

LAUNCHER_VARIABLES = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
"""Set by horovodrun (Gloo), Open MPI's and MPICH's mpirun for each rank."""


def launched(environ=None):
  """Whether horovodrun (or mpirun) started this process."""
  environ = os.environ if environ is None else environ
  return any(k in environ for k in LAUNCHER_VARIABLES)


def elastic_requested(environ=None):
  """Whether horovodrun started this process as an elastic job."""
  environ = os.environ if environ is None else environ
  return environ.get("HOROVOD_ELASTIC") == "1"


PATCH_MARKER = os.path.join(sys.prefix, ".horovod-patch")
"""Written by tools/rig/setup_env.sh into the environment whose Horovod it
built with third_party/horovod/process_set_iface.patch (the patch's
checksum)."""


def hostname_address():
  """(host name, its first address, where Gloo binds without an interface)."""
  name = socket.gethostname()
  try:
    infos = socket.getaddrinfo(name, None, 0, socket.SOCK_STREAM)
  except OSError:
    return name, None
  return name, infos[0][4][0] if infos else None


def check_process_set_interface(environ, resolve=hostname_address,
                                marker=PATCH_MARKER):
  """Refuses, in one line, a job that an unpatched Horovod would abort.

  Horovod 0.28.1 forms its process set on the host name's address; on
  loopback a multi-host hvd.init() aborts with a bare gloo::IoException.

  Raises:
    errors.TopologyError: a multi-host Gloo job on a loopback host name,
      with an unpatched Horovod.
  """
  if "HOROVOD_GLOO_RENDEZVOUS_ADDR" not in environ:
    return  # not horovodrun's Gloo rendezvous (mpirun, or no launcher)
  try:
    spans_hosts = (int(environ.get("HOROVOD_SIZE", "1")) >
                   int(environ.get("HOROVOD_LOCAL_SIZE", "1")))
  except ValueError:
    return
  if not spans_hosts:
    return  # loopback reaches every peer on one host
  try:
    with open(marker, encoding="utf-8") as f:
      if f.read().strip():
        return
  except OSError:
    pass
  name, address = resolve()
  if address is None or not ipaddress.ip_address(
      address.split("%")[0]).is_loopback:
    return
  host = environ.get("HOROVOD_HOSTNAME") or name
  raise errors.TopologyError(
      f"Horovod rank {environ.get('HOROVOD_RANK', '?')} on {host}: the host "
      f"name {name} resolves to {address} (loopback) and the installed "
      "Horovod lacks third_party/horovod/process_set_iface.patch, so "
      "hvd.init() would abort with gloo::IoException (connect "
      f"[{address}]: Connection refused) on a job spanning hosts; fix: "
      "`make setup` (builds Horovod with the patch), or map "
      f"{name} to this host's own address in /etc/hosts")


def read_topology(hvd, backend):
  """The topology of an initialised Horovod rank."""
  return topology_lib.Topology(
      backend=backend, num_workers=hvd.size(), worker_index=hvd.rank(),
      is_chief=hvd.rank() == 0, local_rank=hvd.local_rank(),
      local_size=hvd.local_size())


def bind_rank(hvd, backend, intra_op_threads):
  """(topology, threads per op) of this rank, bound to its cores; call before
  any TensorFlow op."""
  topology = read_topology(hvd, backend)
  cores = binding.bind_to_cores(topology, os.environ, intra_op_threads)
  threads = intra_op_threads or (len(cores) if cores else max(
      1, len(os.sched_getaffinity(0)) // topology.local_size))
  base.pin_threads(threads, requested=bool(intra_op_threads))
  return topology, threads


def init_horovod():
  """horovod.tensorflow initialised for this rank (again: no-op)."""
  if not launched() and slurm.in_step(os.environ):
    srun.start_rank(os.environ)
  hvd = import_horovod()
  check_process_set_interface(os.environ)
  faults.watch_launcher()
  binding.apply_defaults(os.environ)
  hvd.init()
  return hvd


def import_horovod():
  """horovod.tensorflow, or a TopologyError saying how to get a rank."""
  if not launched():
    raise errors.TopologyError(
        "distribution='horovod' needs the process to be started by horovodrun, "
        "e.g. horovodrun -np 2 -H localhost:2 python -m estimator_scale.cli "
        "--distribution=horovod ..., or by srun in a Slurm allocation")
  try:
    # Lazy: Horovod is optional, and only a rank imports it.
    import horovod.tensorflow as hvd  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise errors.TopologyError(
        f"distribution='horovod' needs Horovod ({e}); install it with "
        "`make setup` (builds horovod==0.28.1 with Gloo)") from None
  return hvd

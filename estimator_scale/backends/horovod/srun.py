"""Horovod ranks that srun started: Gloo's rendezvous without horovodrun."""
import socket
import threading
import time

from absl import logging

from estimator_scale import environment
from estimator_scale import errors
from estimator_scale.backends import slurm


def _serve_rendezvous(ranks, port):
  """Serves the Gloo rendezvous of `ranks` on `port` from a daemon thread."""
  # Lazy: Horovod is optional, and only a rank imports it.
  from horovod.runner.common.util import hosts  # pylint: disable=g-import-not-at-top
  from horovod.runner.http import http_server  # pylint: disable=g-import-not-at-top
  try:
    server = http_server.RendezvousHTTPServer(
        ("", port), http_server.RendezvousHandler, 0)
  except OSError as e:
    raise errors.ConfigError(
        f"Horovod's rendezvous cannot listen on port {port} of "
        f"{socket.gethostname()} ({e.strerror}); choose a free one with "
        f"{environment.PORT}") from None
  server.init([hosts.SlotInfo(**vars(rank)) for rank in ranks])
  threading.Thread(target=server.serve_forever, name="horovod_rendezvous",
                   daemon=True).start()
  return server


def _address(node):
  try:
    return socket.gethostbyname(node)
  except OSError as e:
    raise errors.TopologyError(
        f"the Slurm step's first node {node!r} ({slurm.NODELIST}) does not "
        f"resolve to an address here ({e.strerror}); Horovod's rendezvous "
        "runs there") from None


def _interface(address):
  """The (non-loopback) network interface carrying `address` here, or None."""
  if address.startswith("127."):
    return None
  # Lazy: a Horovod dependency, and only a rank has Horovod.
  import psutil  # pylint: disable=g-import-not-at-top
  for name, addresses in psutil.net_if_addrs().items():
    if any(a.family == socket.AF_INET and a.address == address
           for a in addresses):
      return name
  return None


RENDEZVOUS_WAIT_S = 120
"""How long a task waits for task 0's rendezvous: srun starts the tasks
together, but task 0 serves only after importing TensorFlow and Horovod."""


def _wait_for_rendezvous(address, port, node, timeout=RENDEZVOUS_WAIT_S):
  deadline = time.monotonic() + timeout
  while True:
    try:
      socket.create_connection((address, port), timeout=2).close()
      return
    except OSError:
      if time.monotonic() > deadline:
        raise errors.TopologyError(
            f"Horovod's rendezvous on {node} ({address}:{port}), which the "
            f"Slurm step's task 0 serves, did not answer in {timeout} s: "
            "did task 0 fail?") from None
      time.sleep(0.2)


def start_rank(environ, serve=_serve_rendezvous, wait=_wait_for_rendezvous):
  """Makes this task of a Slurm step a Horovod rank, as horovodrun would.

  Sets HOROVOD_* in `environ`; returns the rendezvous server on task 0
  (which starts it), None on the others.

  Raises:
    errors.TopologyError, errors.ConfigError: naming the variable at fault.
  """
  step = slurm.read_step(environ)
  ranks = slurm.horovod_ranks(step)
  port = slurm.rendezvous_port(environ)
  address = _address(step.nodes[0])
  if step.task == 0:
    server = serve(ranks, port)
  else:
    server = None
    wait(address, port, step.nodes[0])
  environ.update(ranks[step.task].environment())
  environ.update({"HOROVOD_GLOO_RENDEZVOUS_ADDR": address,
                  "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
                  "HOROVOD_CONTROLLER": "gloo",
                  "HOROVOD_CPU_OPERATIONS": "gloo"})
  if not environ.get("HOROVOD_GLOO_IFACE"):
    iface = _interface(_address(step.node))
    if iface:
      environ["HOROVOD_GLOO_IFACE"] = iface
  logging.info("Horovod rank %d of %d from Slurm task %d on %s; rendezvous "
               "at %s:%d", step.task, step.size, step.task, step.node,
               address, port)
  return server

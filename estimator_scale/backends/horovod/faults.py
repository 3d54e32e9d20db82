"""A lost host, link or launcher: every Horovod rank ends, naming the lost."""
import concurrent.futures
import contextlib
import os
import re
import select
import signal
import socket
import stat
import sys
import threading
import time

from absl import logging
import tensorflow as tf

from estimator_scale import errors

GRACE_SECONDS = 10
"""How long a rank whose launcher is gone gets to stop by itself (the stop a
SIGTERM asks for: every rank after the same update, rank 0's checkpoint
written) before it is ended outright. horovodrun gives its local ranks a
similar grace; a rank blocked on a peer that is gone too never stops by
itself."""

EXIT_LAUNCHER_GONE = 143
"""A rank ended by the watchdog exits as if killed by SIGTERM."""

PROBE_SECONDS = 3.0
"""How long a rank waits for another rank's process to accept a connection.
A live process accepts at once, however busy (the kernel completes the
handshake), so only a host that is down or cut off uses it up."""

DYING_SECONDS = 3.0
"""How long after a failed collective a rank keeps probing peers that all
answered: a killed peer's connections reset before its listener closes, and
on a busy host that gap can outlast the first probe."""

STALL_MARGIN_SECONDS = 10
"""How long past Horovod's Gloo timeout a rank may go without an update
before it asks whether its peers are there: by then Horovod's own error
should have ended it, and a rank still waiting is blocked for good."""

EXIT_STALLED = 2
"""A rank ended by `StallWatch` exits as the command line does on the
TopologyError it would have raised."""

SHUT_DOWN = "Horovod has been shut down"
"""What every Horovod op raises once the background loop has failed."""

_FAILED_NODE = re.compile(r"\{\{node ([^}]+)\}\}")
"""The node a TensorFlow error's message names as the one that failed."""


def collective_failed(error):
  """Whether `error` is a collective's failure (lost peer), not this rank's."""
  if SHUT_DOWN in str(error):
    return True
  op = getattr(error, "op", None)
  if op is not None:
    return op.type.startswith("Horovod")
  # An op of a function's body (accumulation's loop, where sharded tables
  # exchange rows) has no op in the graph: the message names its node, which
  # Horovod names after its kind.
  return any(node.rpartition("/")[2].startswith("Horovod")
             for node in _FAILED_NODE.findall(str(error)))


_DISK_FULL = ("No space left on device", "Disk quota exceeded")
"""What a write to a full disk raises (ENOSPC, EDQUOT), in TensorFlow's
errors as in Python's."""


def disk_full(error):
  """The line of `error` saying a write found its disk full, or None."""
  return next((line.strip() for line in str(error).splitlines()
               if any(text in line for text in _DISK_FULL)), None)


_watchdog_started = False


def output_pipes():
  """This process's stdout and stderr where they are pipes or sockets."""
  fds = []
  for fd in (1, 2):
    try:
      mode = os.fstat(fd).st_mode
    except OSError:
      continue
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
      fds.append(fd)
  return fds


def wait_until_unread(fds, timeout=None):
  """Whether one of `fds` lost its reader within `timeout` s (None: forever)."""
  poller = select.poll()
  for fd in fds:
    poller.register(fd, 0)
  return bool(poller.poll(None if timeout is None else timeout * 1000))


def watch_launcher(grace_seconds=GRACE_SECONDS, environ=None):
  """Ends this rank once nobody reads its output; returns whether it watches.
  Start before hvd.init(), once per process."""
  global _watchdog_started
  environ = os.environ if environ is None else environ
  fds = output_pipes()
  if _watchdog_started or not fds:
    return False
  _watchdog_started = True
  if environ.get("HOROVOD_ELASTIC") == "1":
    grace_seconds = 0
  threading.Thread(target=_end_when_unread, args=(fds, grace_seconds),
                   name="launcher_watchdog", daemon=True).start()
  return True


def _end_when_unread(fds, grace_seconds):
  wait_until_unread(fds)
  logging.warning("nobody reads this Horovod rank's output (its launcher or "
                  "ssh connection is gone): stopping it")
  if not grace_seconds:
    os._exit(EXIT_LAUNCHER_GONE)  # pylint: disable=protected-access
  os.kill(os.getpid(), signal.SIGTERM)
  time.sleep(grace_seconds)
  os._exit(EXIT_LAUNCHER_GONE)  # pylint: disable=protected-access


def _interface_address(iface):
  """IPv4 address of `iface` (HOROVOD_GLOO_IFACE), or None: reachable by the
  other ranks whatever the host names resolve to."""
  if not iface:
    return None
  try:
    # Lazy: optional here, it comes with Horovod, which only a rank has.
    import psutil  # pylint: disable=g-import-not-at-top
  except ImportError:  # a Horovod dependency, but not one of ours
    return None
  for address in psutil.net_if_addrs().get(iface, ()):
    if address.family == socket.AF_INET:
      return address.address
  return None


class _Listener:
  """A port that accepts connections for as long as this process lives."""

  def __init__(self):
    self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    self._socket.bind(("", 0))
    self._socket.listen(128)
    self.port = self._socket.getsockname()[1]
    # Accepted and closed at once, so probes never fill the backlog.
    threading.Thread(target=self._accept, name="rank_liveness",
                     daemon=True).start()

  def _accept(self):
    while True:
      try:
        connection, _ = self._socket.accept()
      except OSError:
        return
      connection.close()


def probe(address, port, timeout=PROBE_SECONDS):
  """None when a process listens at (address, port); else why not."""
  try:
    with socket.create_connection((address, port), timeout=timeout):
      return None
  except ConnectionRefusedError:
    return "its process is gone"
  except OSError:  # a timeout, an unreachable host or network
    return "its host does not answer: down, or its link is cut"


class Peers:
  """Every rank's (host, address to probe or None, port), in `table`."""

  def __init__(self, rank, table, listener=None):
    self.rank = rank
    self.table = list(table)
    self._listener = listener

  @classmethod
  def exchange(cls, hvd, environ):
    """Opens this rank's listener and learns every rank's (a collective)."""
    listener = _Listener()
    host = environ.get("HOROVOD_HOSTNAME") or socket.gethostname()
    address = _interface_address(environ.get("HOROVOD_GLOO_IFACE"))
    table = hvd.allgather_object((host, address, listener.port),
                                 name="estimator_scale_peers")
    return cls(hvd.rank(), table, listener)

  def host(self, rank):
    return self.table[rank][0]

  def lost(self, timeout=PROBE_SECONDS):
    """[(rank, why)] of the other ranks not answering, probed at once."""
    others = [r for r in range(len(self.table))
              if r != self.rank and self.table[r][1]]
    if not others:
      return []
    with concurrent.futures.ThreadPoolExecutor(min(32, len(others))) as pool:
      answers = pool.map(
          lambda r: probe(self.table[r][1], self.table[r][2], timeout), others)
      return [(r, why) for r, why in zip(others, answers) if why]

  def describe(self, lost):
    """The one line that ends a rank which lost `lost` ([(rank, why)])."""
    names = "; ".join(f"rank {r} on {self.host(r)} ({why})" for r, why in lost)
    return (f"Horovod rank {self.rank} on {self.host(self.rank)} lost {names}, "
            "so every rank stops; start the job again on the hosts that "
            "remain to resume from the last checkpoint")


_END = object()


class NamingLostRanks:
  """A coordinator whose failure after a lost rank names it; where every rank
  answers, the original error stands."""

  def __init__(self, coordinator, peers, stall_seconds):
    self._coordinator = coordinator
    self._peers = peers
    self._stall = StallWatch(peers, stall_seconds)

  def __getattr__(self, name):
    return getattr(self._coordinator, name)

  @contextlib.contextmanager
  def _naming_lost_ranks(self):
    try:
      with self._stall.watching():
        yield
    except Exception as e:  # pylint: disable=broad-except
      if not collective_failed(e):
        raise
      lost = self._peers.lost()
      deadline = time.monotonic() + DYING_SECONDS
      while not lost and time.monotonic() < deadline:
        time.sleep(0.2)
        lost = self._peers.lost()
      if not lost:
        raise
      raise errors.TopologyError(self._peers.describe(lost)) from e

  def broadcast(self, value):
    """See HorovodCoordinator."""
    with self._naming_lost_ranks():
      return self._coordinator.broadcast(value)

  def train(self, estimator, input_fn, hooks, steps, max_steps,
            listeners=()):
    """See HorovodCoordinator."""
    with self._naming_lost_ranks():
      return self._coordinator.train(estimator, input_fn,
                                     hooks + [self._stall.hook()], steps,
                                     max_steps, listeners)

  def evaluate(self, *args, **kwargs):
    """See HorovodCoordinator."""
    with self._naming_lost_ranks():
      return self._coordinator.evaluate(*args, **kwargs)

  def predict(self, *args, on_ranks=False, **kwargs):
    """See HorovodCoordinator; on the ranks, each batch is watched."""
    if not on_ranks:  # alone: the others may be gone
      return self._coordinator.predict(*args, **kwargs)
    with self._naming_lost_ranks():
      predictions = self._coordinator.predict(*args, on_ranks=True, **kwargs)
    return self._watched(predictions)

  def _watched(self, predictions):
    try:
      while True:
        with self._naming_lost_ranks():
          item = next(predictions, _END)
        if item is _END:
          return
        yield item
    finally:
      with self._naming_lost_ranks():
        predictions.close()

  def export(self, *args, **kwargs):
    """See HorovodCoordinator."""
    with self._naming_lost_ranks():
      return self._coordinator.export(*args, **kwargs)


def stall_seconds(environ):
  """How long a rank may go without an update before `StallWatch` probes."""
  gloo_timeout = float(environ.get("HOROVOD_GLOO_TIMEOUT_SECONDS") or 30)
  return gloo_timeout + STALL_MARGIN_SECONDS


def _end_naming(line):
  print(f"{errors.COMMAND_LINE_PREFIX}{line}", file=sys.stderr, flush=True)
  logging.flush()
  os._exit(EXIT_STALLED)  # pylint: disable=protected-access


class StallWatch:
  """Ends a rank stalled for `seconds` while a peer is lost (only a stall costs
  probes); `end` gets the line and must not return."""

  def __init__(self, peers, seconds, end=_end_naming):
    self._peers = peers
    self._seconds = seconds
    self._end = end
    self._lock = threading.Lock()
    self._since = None  # last progress inside a watched call; None outside
    self._thread = None

  @contextlib.contextmanager
  def watching(self):
    """Progress is expected for as long as this block runs."""
    with self._lock:
      self._since = time.monotonic()
      if self._thread is None:
        self._thread = threading.Thread(target=self._watch, daemon=True,
                                        name="stall_watch")
        self._thread.start()
    try:
      yield
    finally:
      with self._lock:
        self._since = None

  def progressed(self):
    with self._lock:
      if self._since is not None:
        self._since = time.monotonic()

  def stalled(self, now):
    """The line naming the lost ranks if stalled with some lost; else None."""
    with self._lock:
      if self._since is None or now - self._since < self._seconds:
        return None
    lost = self._peers.lost()
    if lost:
      return self._peers.describe(lost)
    with self._lock:
      if self._since is not None:
        self._since = now
    return None

  def hook(self):
    """A SessionRunHook whose every update counts as progress."""
    return _ProgressHook(self)

  def _watch(self):
    while True:
      time.sleep(1)
      line = self.stalled(time.monotonic())
      if line:
        self._end(line)


class _ProgressHook(tf.compat.v1.train.SessionRunHook):

  def __init__(self, watch):
    self._watch = watch

  def after_run(self, run_context, run_values):
    self._watch.progressed()

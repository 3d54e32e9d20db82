"""The Horovod backend's fault handling (backends/horovod/faults.py), no rig.

A watchdog for ranks whose launcher is gone, and the one line naming a lost
rank. The same faults on real hosts are tests/multihost/test_horovod_faults.py.
"""
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from horovod.tensorflow import mpi_ops
import pytest
import tensorflow as tf

from estimator_scale import errors
from estimator_scale.backends.horovod import faults
from tests.helpers.processes import ROOT


def test_a_closed_reader_is_seen_at_once_on_a_pipe_and_a_socket():
  read, write = os.pipe()
  assert not faults.wait_until_unread([write], timeout=0.05)
  os.close(read)
  assert faults.wait_until_unread([write], timeout=5)
  os.close(write)
  ours, theirs = socket.socketpair()
  assert not faults.wait_until_unread([ours.fileno()], timeout=0.05)
  theirs.close()
  assert faults.wait_until_unread([ours.fileno()], timeout=5)
  ours.close()


ORPHAN = """
import signal, sys, time
from estimator_scale.backends.horovod import faults
if sys.argv[1] == "ignore":  # a rank that never gets to stop by itself
  signal.signal(signal.SIGTERM, lambda *_: None)
assert faults.watch_launcher(grace_seconds=1)
print("watching", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("sigterm", ["default", "ignore"])
def test_the_watchdog_ends_a_rank_nobody_reads(sigterm):
  rank = subprocess.Popen([sys.executable, "-c", ORPHAN, sigterm], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  assert rank.stdout.readline() == b"watching\n", rank.stderr.read()
  start = time.monotonic()
  rank.stdout.close()
  rank.stderr.close()
  code = rank.wait(timeout=30)
  if sigterm == "default":  # the SIGTERM horovodrun would have sent
    assert code == -signal.SIGTERM
  else:  # ended after the grace
    assert code == faults.EXIT_LAUNCHER_GONE
    assert time.monotonic() - start >= 1
  assert time.monotonic() - start < 10


def test_the_watchdog_ignores_output_that_goes_to_a_file(tmp_path):
  with open(tmp_path / "log", "w") as log:
    subprocess.run(
        [sys.executable, "-c",
         "from estimator_scale.backends.horovod import faults; "
         "print('watching:', faults.watch_launcher())"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=60,
        check=True)
  output = (tmp_path / "log").read_text()
  assert output.splitlines()[-1] == "watching: False", output


def _silent_port():
  """A port whose backlog is full: connections time out, as to a host that
  is down or cut off."""
  server = socket.socket()
  server.bind(("127.0.0.1", 0))
  server.listen(0)
  port = server.getsockname()[1]
  held = []
  for _ in range(4):
    client = socket.socket()
    client.settimeout(0.2)
    try:
      client.connect(("127.0.0.1", port))
      held.append(client)
    except OSError:
      client.close()
  return port, [server] + held


def _closed_port():
  s = socket.socket()
  s.bind(("127.0.0.1", 0))
  port = s.getsockname()[1]
  s.close()
  return port


def test_peers_name_the_ranks_that_do_not_answer():
  alive = faults._Listener()  # pylint: disable=protected-access
  silent, keep = _silent_port()
  peers = faults.Peers(0, [("host1", "127.0.0.1", alive.port),
                           ("host2", "127.0.0.1", alive.port),
                           ("host3", "127.0.0.1", _closed_port()),
                           ("host4", "127.0.0.1", silent)])
  lost = peers.lost(timeout=1)
  assert lost == [(2, "its process is gone"),
                  (3, "its host does not answer: down, or its link is cut")]
  assert peers.describe(lost) == (
      "Horovod rank 0 on host1 lost rank 2 on host3 (its process is gone); "
      "rank 3 on host4 (its host does not answer: down, or its link is cut), "
      "so every rank stops; start the job again on the hosts that remain to "
      "resume from the last checkpoint")
  for s in keep:
    s.close()


STALL_NEVER = 3600
"""A stall limit no test reaches (the stall watch is tested on its own)."""


class _FailingCoordinator:
  can_broadcast = True

  def __init__(self, error):
    self.error = error

  def train(self, *args, **kwargs):
    raise self.error


def test_horovods_shutdown_becomes_one_line_naming_the_lost_rank():
  alive = faults._Listener()  # pylint: disable=protected-access
  shut_down = RuntimeError("Graph execution error: Horovod has been shut "
                           "down. This was caused by an exception on one of "
                           "the ranks")
  lost = faults.Peers(1, [("host1", "127.0.0.1", _closed_port()),
                          ("host2", "127.0.0.1", alive.port)])
  coordinator = faults.NamingLostRanks(_FailingCoordinator(shut_down), lost,
                                       STALL_NEVER)
  assert coordinator.can_broadcast
  with pytest.raises(errors.TopologyError) as raised:
    coordinator.train(None, None, [], None, 10)
  assert str(raised.value).startswith(
      "Horovod rank 1 on host2 lost rank 0 on host1 (its process is gone)")
  assert raised.value.__cause__ is shut_down
  # Every peer answers: the rank failed on an error of its own, which stands.
  everyone = faults.Peers(0, [("host1", "127.0.0.1", alive.port),
                              ("host2", "127.0.0.1", alive.port)])
  with pytest.raises(RuntimeError) as raised:
    faults.NamingLostRanks(_FailingCoordinator(shut_down), everyone,
                           STALL_NEVER).train(None, None, [], None, 10)
  assert raised.value is shut_down
  other = ValueError("a model error")
  with pytest.raises(ValueError) as raised:
    faults.NamingLostRanks(_FailingCoordinator(other), lost,
                           STALL_NEVER).train(None, None, [], None, 10)
  assert raised.value is other


def test_a_peer_whose_listener_closes_just_after_the_collective_is_named():
  dying = faults._Listener()  # pylint: disable=protected-access
  shut_down = RuntimeError("Horovod has been shut down.")
  peers = faults.Peers(1, [("host1", "127.0.0.1", dying.port),
                           ("host2", "127.0.0.1", dying.port)])
  # The process's exit, some time after its connections reset.
  threading.Timer(0.5, dying._socket.shutdown, [socket.SHUT_RDWR]).start()  # pylint: disable=protected-access
  with pytest.raises(errors.TopologyError, match="lost rank 0 on host1"):
    faults.NamingLostRanks(_FailingCoordinator(shut_down), peers,
                           STALL_NEVER).train(None, None, [], None, 10)


def test_a_collective_whose_transfer_broke_names_the_lost_rank_too():
  # The other way Horovod fails an op, by a race with its shutdown: the op
  # raises the transport's own error, whose text names no Horovod.
  with tf.Graph().as_default():
    value = tf.constant([1.0])
    allreduce = mpi_ops._allreduce(value).op  # pylint: disable=protected-access
    own = tf.identity(value).op
  message = "[gloo/transport/tcp/pair.cc:598] Connection closed by peer"
  broken = tf.errors.UnknownError(None, allreduce, message)
  assert faults.collective_failed(broken)
  assert not faults.collective_failed(tf.errors.UnknownError(None, own,
                                                             message))
  assert not faults.collective_failed(ValueError("a model error"))
  # An op of accumulation's loop body has no op in the graph: TensorFlow's
  # message names its node (as a chaos run's sharded tables logged it).
  in_loop = ("Graph execution error:\n\n[gloo/transport/tcp/unbound_buffer.cc"
             ":133] Timed out waiting 30000ms for send operation to complete"
             "\n\t [[{{node %s}}]]")
  assert faults.collective_failed(tf.errors.UnknownError(
      None, None, in_loop % "model/HorovodAlltoall_model_GatherV2_3_0"))
  assert not faults.collective_failed(tf.errors.UnknownError(
      None, None, in_loop % "model/dense/MatMul"))
  lost = faults.Peers(1, [("host1", "127.0.0.1", _closed_port()),
                          ("host2", "127.0.0.1", faults._Listener().port)])  # pylint: disable=protected-access
  with pytest.raises(errors.TopologyError) as raised:
    faults.NamingLostRanks(_FailingCoordinator(broken), lost,
                           STALL_NEVER).train(None, None, [], None, 10)
  assert str(raised.value).startswith(
      "Horovod rank 1 on host2 lost rank 0 on host1 (its process is gone)")


def test_a_stalled_call_probes_its_peers_and_names_the_lost_ones():
  alive = faults._Listener()  # pylint: disable=protected-access
  everyone = faults.Peers(0, [("host1", "127.0.0.1", alive.port),
                              ("host2", "127.0.0.1", alive.port)])
  lost = faults.Peers(0, [("host1", "127.0.0.1", alive.port),
                          ("host2", "127.0.0.1", _closed_port())])
  ended = []
  watch = faults.StallWatch(lost, 30, end=ended.append)
  now = time.monotonic()
  assert watch.stalled(now + 60) is None  # outside a watched call
  with watch.watching():
    assert watch.stalled(time.monotonic() + 29) is None
    watch.hook().after_run(None, None)  # an update: the clock starts again
    assert watch.stalled(time.monotonic() + 29) is None
    assert watch.stalled(time.monotonic() + 31) == (
        "Horovod rank 0 on host1 lost rank 1 on host2 (its process is "
        "gone), so every rank stops; start the job again on the hosts that "
        "remain to resume from the last checkpoint")
  healthy = faults.StallWatch(everyone, 30, end=ended.append)
  with healthy.watching():
    later = time.monotonic() + 31
    # A long step with every peer there: nothing, and no probe for another
    # 30 s.
    assert healthy.stalled(later) is None
    assert healthy.stalled(later + 29) is None
  assert not ended


STALLED = """
import sys, time
from estimator_scale.backends.horovod import faults
peers = faults.Peers(0, [("host1", None, 0),
                         ("host2", "127.0.0.1", int(sys.argv[1]))])
watch = faults.StallWatch(peers, 1)
with watch.watching():
  print("stalled", flush=True)
  time.sleep(60)  # an op that never returns
"""


def test_a_rank_stalled_with_a_lost_peer_ends_naming_it():
  rank = subprocess.Popen([sys.executable, "-c", STALLED, str(_closed_port())],
                          cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  assert rank.stdout.readline() == "stalled\n", rank.stderr.read()
  start = time.monotonic()
  code = rank.wait(timeout=30)
  assert code == faults.EXIT_STALLED
  assert time.monotonic() - start < 10
  assert rank.stderr.read().splitlines()[-1] == (
      "estimator-scale: error: Horovod rank 0 on host1 lost rank 1 on host2 "
      "(its process is gone), so every rank stops; start the job again on "
      "the hosts that remain to resume from the last checkpoint")

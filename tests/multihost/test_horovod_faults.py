"""Faults across hosts of a horovodrun job: a host that dies, a link cut, a
host without the job's Python, a launcher stopped.

Each job runs from host1 (one rank per host, names resolving to loopback, so
horovodrun starts both ranks over ssh) and must end on every host within 60 s
with no process left, a non-zero exit and a line naming the lost rank or
host; after a lost host, the job started again on host1 alone resumes from
the last checkpoint. What horovodrun does by itself and what the Horovod
backend adds (a watchdog for ranks whose launcher is gone, the line naming a
lost rank) is in estimator_scale/backends/horovod/faults.py. The unit tests
at the end check those parts without a rig.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from estimator_scale import errors
from estimator_scale.backends.horovod import faults
from tests.multihost.conftest import PYTHON, ROOT
from tests.multihost.conftest import checkpoint_step, job_processes
from tests.multihost.conftest import start_until_checkpoint
from tests.multihost.test_horovod_hosts import (ENV, horovodrun_argv,
                                                train_argv)

multihost = pytest.mark.multihost

LIMIT = 60
"""Seconds from a fault to the end of the job on every host."""


def _wait_until_no_process(hosts, deadline):
  while any(job_processes(h) for h in hosts):
    assert time.monotonic() < deadline, {h.name: job_processes(h)
                                         for h in hosts}
    time.sleep(0.5)


def _start_until_checkpoint(host1, hosts, model_dir):
  """A long job from host1, once it has checkpointed past step 50."""
  return start_until_checkpoint(
      host1, horovodrun_argv(hosts, *train_argv(
          model_dir, "--train_steps=100000", "--save_checkpoints_steps=50")),
      model_dir, ENV)


def _output_within(proc, deadline):
  try:
    return proc.communicate(timeout=max(0, deadline - time.monotonic()))[0]
  except subprocess.TimeoutExpired:
    proc.kill()
    pytest.fail(f"the job did not end within {LIMIT} s of the fault: "
                f"{proc.communicate()[0][-3000:]}")


def _restart_resumes(host1, tmp_path, model_dir):
  """horovodrun on host1 alone carries on from the last checkpoint."""
  resumed_from = checkpoint_step(model_dir)
  assert resumed_from >= 50
  summary = tmp_path / "summary.json"
  proc = host1.run(
      horovodrun_argv([host1.name], *train_argv(
          model_dir, f"--train_steps={resumed_from + 50}",
          f"--summary_json={summary}")),
      cwd=ROOT, env=ENV, timeout=300)
  assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
  result = json.loads(summary.read_text())
  assert result["workers"] == 1 and result["global_step"] == resumed_from + 50


@multihost
@pytest.mark.parametrize("fault", ["host_dies", "link_down"])
def test_a_lost_host_ends_the_job_everywhere_and_a_restart_resumes(
    cluster, tmp_path, fault):
  host1, host2 = cluster(2, loopback_hostname=True).hosts
  model_dir = tmp_path / "model"
  proc = _start_until_checkpoint(host1, [host1.name, host2.name], model_dir)
  deadline = time.monotonic() + LIMIT
  if fault == "host_dies":
    host2.kill_all()
  else:
    host2.set_link(False)
  log = _output_within(proc, deadline)
  assert proc.returncode != 0, log[-3000:]
  named = [l for l in log.splitlines() if "estimator-scale: error:" in l]
  if fault == "host_dies":
    # Its ssh connection drops at once, so horovodrun names rank 1 itself
    # and may stop rank 0 before rank 0's own line gets out.
    why = "its process is gone"
    by_horovodrun = ("Terminating remaining workers after failure of "
                     "Process 1." in log)
  else:
    # Rank 0 gives up first, and horovodrun blames it: only rank 0's line
    # names the rank that went silent.
    why = "its host does not answer: down, or its link is cut"
    by_horovodrun = False
  if named or not by_horovodrun:
    assert len(named) == 1, log[-3000:]
    assert named[0].startswith(
        "[0]<stderr>:estimator-scale: error: Horovod rank 0 on host1 lost "
        f"rank 1 on host2 ({why}), so every rank stops;"), log[-3000:]
  _wait_until_no_process([host1, host2], deadline)
  _restart_resumes(host1, tmp_path, model_dir)


@multihost
def test_a_host_without_the_jobs_python_ends_the_job_naming_its_rank(
    cluster, tmp_path):
  host1, host2 = cluster(2, loopback_hostname=True).hosts
  hosts = [host1.name, host2.name]
  # horovodrun checks the hosts (ssh, a common NIC) with its own Python and
  # keeps the result for an hour per -np and -H; a host that lost the Python
  # since fails at its rank. (Without that result: the next test.)
  checked = host1.run(horovodrun_argv(hosts, "true"), env=ENV, timeout=120)
  assert checked.returncode == 0, checked.stdout + checked.stderr
  hidden = host2.run(["mount", "-t", "tmpfs", "tmpfs",
                      os.path.join(ROOT, ".venv")])
  assert hidden.returncode == 0, hidden.stderr
  deadline = time.monotonic() + LIMIT
  proc = host1.run(horovodrun_argv(hosts, *train_argv(tmp_path / "model")),
                   cwd=ROOT, env=ENV, timeout=LIMIT + 60)
  log = proc.stdout + proc.stderr
  assert time.monotonic() < deadline, log[-3000:]
  assert proc.returncode != 0, log[-3000:]
  lines = log.splitlines()
  assert f"[1]<stderr>:env: '{PYTHON}': No such file or directory" in lines
  assert "Process 1 exit with status code 127." in lines, log[-3000:]
  # Rank 0, started over ssh and abandoned there, ends by its watchdog.
  _wait_until_no_process([host1, host2], deadline)


@multihost
def test_horovodruns_first_check_of_a_host_without_the_python(cluster):
  host1, host2 = cluster(2, loopback_hostname=True).hosts
  hidden = host2.run(["mount", "-t", "tmpfs", "tmpfs",
                      os.path.join(ROOT, ".venv")])
  assert hidden.returncode == 0, hidden.stderr
  deadline = time.monotonic() + LIMIT
  # Its own check (no result kept from earlier) runs horovodrun's Python on
  # every host and fails first: no rank starts. horovodrun prints why only
  # when unbuffered (it leaves with os._exit), and names neither rank nor
  # host; its check server on host1 (started over ssh) waits out its start
  # timeout.
  proc = host1.run(horovodrun_argv([host1.name, host2.name], "true",
                                   options=["--disable-cache"]),
                   env={**ENV, "PYTHONUNBUFFERED": "1"}, timeout=LIMIT + 60)
  log = proc.stdout + proc.stderr
  assert proc.returncode == 127, log[-3000:]
  assert "Launching horovod task function was not successful" in log
  assert re.search(r"\.venv/bin/python\S*: No such file or directory", log)
  _wait_until_no_process([host1, host2], deadline)


@multihost
def test_a_stopped_horovodrun_leaves_no_rank_on_any_host(cluster, tmp_path):
  host1, host2 = cluster(2, loopback_hostname=True).hosts
  model_dir = tmp_path / "model"
  proc = _start_until_checkpoint(host1, [host1.name, host2.name], model_dir)
  deadline = time.monotonic() + LIMIT
  # Ctrl-C: horovodrun stops its ssh clients, and each rank, seeing nobody
  # read its output, stops itself (without the watchdog both train on).
  proc.send_signal(signal.SIGINT)
  log = _output_within(proc, deadline)
  # horovodrun's own status is 0 or not by a race: the ranks stop cleanly
  # (SIGTERM, a final checkpoint), and it may see them exit 0 before its
  # own interrupt handling ends it. The job was stopped, not finished:
  assert 50 <= checkpoint_step(model_dir) < 100000, log[-3000:]
  _wait_until_no_process([host1, host2], deadline)


# The backend's parts, without a rig.


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
  coordinator = faults.NamingLostRanks(_FailingCoordinator(shut_down), lost)
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
    faults.NamingLostRanks(_FailingCoordinator(shut_down), everyone).train()
  assert raised.value is shut_down
  other = ValueError("a model error")
  with pytest.raises(ValueError) as raised:
    faults.NamingLostRanks(_FailingCoordinator(other), lost).train()
  assert raised.value is other


def test_a_collective_whose_transfer_broke_names_the_lost_rank_too():
  # The other way Horovod fails an op, by a race with its shutdown: the op
  # raises the transport's own error, whose text names no Horovod.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from horovod.tensorflow import mpi_ops  # pylint: disable=g-import-not-at-top
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
  lost = faults.Peers(1, [("host1", "127.0.0.1", _closed_port()),
                          ("host2", "127.0.0.1", faults._Listener().port)])  # pylint: disable=protected-access
  with pytest.raises(errors.TopologyError) as raised:
    faults.NamingLostRanks(_FailingCoordinator(broken), lost).train()
  assert str(raised.value).startswith(
      "Horovod rank 1 on host2 lost rank 0 on host1 (its process is gone)")

"""A remote task stops itself when the launcher's heartbeat stops reaching
it: with a host's link cut, its ssh session stays open (nothing tells its
sshd the launcher is gone) and, before the heartbeat, its tasks outlived the
job until TCP gave up (tests/multihost/test_launch_hosts.py, link_down).
The remote script runs here under a local bash, as sshd would run it."""
import subprocess
import time

import pytest

from estimator_scale.launcher import remote
from tests.helpers import processes


@pytest.fixture
def short_silence(monkeypatch):
  monkeypatch.setattr(remote, "SILENCE_SECS", 2)


def _start(cwd):
  """The remote script of a task that prints its pid, then sleeps."""
  argv, payload = remote.remote_command(
      "somehost", ["bash", "-c", "echo $$; exec sleep 600"], {"A": "1"},
      str(cwd))
  proc = subprocess.Popen(["bash", "-c", argv[-1]], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, start_new_session=True)
  proc.stdin.write(payload)
  proc.stdin.flush()
  return proc, int(proc.stdout.readline())


def test_a_task_that_hears_the_heartbeat_runs_on(short_silence, tmp_path):
  proc, pid = _start(tmp_path)
  try:
    for _ in range(8):  # 4 s: twice the silence allowed
      time.sleep(0.5)
      proc.stdin.write(b"\n")
      proc.stdin.flush()
    assert processes.alive(pid) and proc.poll() is None
  finally:
    proc.stdin.close()
    assert proc.wait(10) != 0
  assert not processes.alive(pid)


def test_a_task_whose_launcher_falls_silent_stops(short_silence, tmp_path):
  proc, pid = _start(tmp_path)
  start = time.monotonic()
  try:
    code = proc.wait(15)  # stdin stays open: only the silence ends it
  finally:
    proc.kill()
  assert code != 0
  # Not before the silence allowed (2 s); well before the 15 s wait, which
  # only the silence can end.
  assert 2 <= time.monotonic() - start < 10
  assert not processes.alive(pid)

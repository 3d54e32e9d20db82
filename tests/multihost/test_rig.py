"""The rig itself (tools/rig/cluster.py): names, ssh, teardown, faults, shaping.

Later multi-host tests trust it to behave like separate machines; each test
here checks one thing they rely on, against the real namespaces.
"""
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from tests.helpers import waiting
from tools.rig import cluster as cluster_lib


# Fails fast on a dead peer, for the link tests (the rig's ssh config waits 10 s).
QUICK_SSH = ("-o", "ConnectTimeout=2")


def output(host, cmd, **kwargs):
  proc = host.run(cmd, timeout=30, **kwargs)
  assert proc.returncode == 0, (host, cmd, proc.stdout, proc.stderr)
  return proc.stdout.strip()


def state(pid):
  """A process's state letter ("Z" for a zombie), or None once it is gone."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()[0]
  except (FileNotFoundError, ProcessLookupError):  # gone meanwhile
    return None


def test_hosts_have_their_own_names_and_addresses_and_reach_each_other_by_ssh(cluster):
  c = cluster(2)
  host1, host2 = c.hosts
  assert (host1.name, host2.name) == ("host1", "host2")
  assert host1.address != host2.address
  for host in c.hosts:
    assert output(host, ["hostname"]) == host.name
    assert f"inet {host.address}/24" in output(host, ["ip", "-4", "-o", "addr", "show", "eth0"])
    # Without loopback_hostname every name resolves to its host's address.
    assert output(host, ["getent", "hosts", host1.name]).split()[0] == host1.address
  assert output(host1, ["hostname"]) != socket.gethostname()  # not the machine's
  assert output(host1, host2.ssh_command("hostname")) == "host2"
  assert output(host2, ["ssh", host1.address, "hostname"]) == "host1"
  # sshd's environment, not the caller's: the reason to use absolute paths.
  assert "PYTEST_CURRENT_TEST" not in output(host1, host2.ssh_command("env"))


def test_loopback_hostname_resolves_a_hosts_own_name_to_127_0_1_1(cluster):
  c = cluster(2, loopback_hostname=True)
  host1, host2 = c.hosts
  lookup = "import socket; print(socket.gethostbyname(socket.gethostname()))"
  assert output(host1, [sys.executable, "-c", lookup]) == "127.0.1.1"
  assert output(host1, ["getent", "hosts", "host2"]).split()[0] == host2.address
  assert output(host2, ["getent", "hosts", "host1"]).split()[0] == host1.address
  assert output(host1, host2.ssh_command("hostname")) == "host2"


def test_each_host_has_its_own_local_disk(cluster):
  c = cluster(2, local_disk="/mnt/local")
  host1, host2 = c.hosts
  output(host1, "echo one > /mnt/local/mark")
  assert output(host1, ["cat", "/mnt/local/mark"]) == "one"
  assert output(host2, ["ls", "-A", "/mnt/local"]) == ""
  assert not os.path.exists("/mnt/local/mark")  # nor on the machine


@pytest.mark.usefixtures("needs_root")
def test_teardown_stops_every_process_of_every_host_even_when_the_body_raises():
  with pytest.raises(RuntimeError, match="body failed"):
    with cluster_lib.Cluster(2) as c:
      sleeper = c.hosts[1].popen(["sleep", "1000"])
      # popen returns before nsenter has joined the host's namespaces.
      waiting.wait_for(lambda: sleeper.pid in c.hosts[1].pids(),
                       "the sleeper in its host", time.monotonic() + 10,
                       poll=0.05)
      pids = [p for host in c.hosts for p in host.pids()]
      assert sleeper.pid in pids and len(pids) >= 3  # and two sshd
      with pytest.raises(cluster_lib.ClusterError, match="already up"):
        cluster_lib.Cluster(1, c.name).up()
      raise RuntimeError("body failed")
  assert sleeper.wait(timeout=5) == -9
  assert [p for p in pids if state(p) not in (None, "Z")] == []
  assert cluster_lib._netns_of(c.name) == []
  assert not os.path.exists(c.state_dir)
  cluster_lib.down(c.name)  # a second down is a no-op


def test_a_pulled_link_makes_a_host_unreachable_until_plugged_back(cluster):
  host1, host2 = cluster(2).hosts
  assert output(host1, host2.ssh_command("hostname", QUICK_SSH)) == "host2"
  host2.set_link(False)
  started = time.monotonic()
  proc = host1.run(host2.ssh_command("hostname", QUICK_SSH), timeout=30)
  assert proc.returncode == 255, proc
  assert "timed out" in proc.stderr, proc.stderr
  assert time.monotonic() - started < 10
  host2.set_link(True)
  assert output(host1, host2.ssh_command("hostname", QUICK_SSH)) == "host2"


def test_kill_all_kills_a_hosts_processes_and_sshd_and_start_sshd_revives_it(cluster):
  host1, host2 = cluster(2).hosts
  sleeper = host2.popen(["sleep", "1000"])
  host2.kill_all()
  assert sleeper.wait(timeout=5) == -9
  assert host2.pids() == []
  proc = host1.run(host2.ssh_command("hostname", QUICK_SSH), timeout=30)
  assert proc.returncode == 255 and "refused" in proc.stderr, proc
  assert host1.pids()  # the other host is untouched
  host2.start_sshd()
  assert output(host1, host2.ssh_command("hostname")) == "host2"


TRANSFER = textwrap.dedent("""
    import socket, sys, time
    role, address, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if role == "receive":
      server = socket.create_server((address, 5001))
      print("listening", flush=True)
      peer, _ = server.accept()
      received, started = 0, time.monotonic()
      while chunk := peer.recv(1 << 16):
        received += len(chunk)
      assert received == size, received
      print(received / (time.monotonic() - started) / 1e6, flush=True)
    else:
      peer = socket.create_connection((address, 5001))
      peer.sendall(b"x" * size)
      peer.close()
""")


def transfer_rate(sender, receiver, script, size):
  """MB/s of one TCP transfer of size bytes from sender to receiver."""
  receive = receiver.popen([sys.executable, script, "receive", receiver.address, str(size)],
                           stdout=subprocess.PIPE, text=True)
  try:
    assert receive.stdout.readline().strip() == "listening"
    output(sender, [sys.executable, script, "send", receiver.address, str(size)])
    rate = float(receive.stdout.readline())
    assert receive.wait(timeout=30) == 0
    return rate
  finally:
    receive.kill()
    receive.wait()


def test_tbf_shaping_limits_a_hosts_link(cluster, tmp_path):
  script = tmp_path / "transfer.py"
  script.write_text(TRANSFER)
  host1, host2 = cluster(2).hosts
  unshaped = transfer_rate(host1, host2, script, 50 << 20)
  host1.shape("100mbit")  # 12.5 MB/s
  shaped_out = transfer_rate(host1, host2, script, 8 << 20)
  shaped_in = transfer_rate(host2, host1, script, 8 << 20)
  host1.shape(None)
  print(f"unshaped {unshaped:.0f} MB/s, shaped {shaped_out:.1f} out, {shaped_in:.1f} in")
  assert unshaped > 50, unshaped
  assert 5 < shaped_out < 20, shaped_out
  assert 5 < shaped_in < 20, shaped_in

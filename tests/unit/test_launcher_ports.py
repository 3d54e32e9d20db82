"""A host that answers ssh again joins an elastic launch only once its
tasks' ports are free: after a cut link, the tasks of the start before can
outlive the cut by many seconds (until their ssh session sees the launcher
gone), and tasks started there meanwhile fail to bind ("Could not start
gRPC server"), each such start a restart spent (the rig's chaos run,
`--backend ps_sync --seed 2` with link_down)."""
import socket
import subprocess

from estimator_scale.launcher import remote


def _free(ports):
  return subprocess.run(remote.ports_free_command(ports), shell=True,
                        check=False).returncode == 0


def test_the_probe_fails_while_a_port_is_listened_on():
  with socket.socket() as held:
    held.bind(("0.0.0.0", 0))
    held.listen()
    port = held.getsockname()[1]
    assert not _free([port - 1, port])
  assert _free([port - 1, port])


def test_no_ports_is_the_plain_probe():
  assert remote.ports_free_command(()) == "true"


def test_answering_asks_each_host_for_its_own_ports(monkeypatch):
  asked = {}

  def answers(host, ssh_port=None, timeout=25, free_ports=()):
    asked[host] = list(free_ports)
    return host != "h3"
  monkeypatch.setattr(remote, "answers", answers)
  found = remote.answering(["h2", "h3"], free_ports={"h2": range(2222, 2224)})
  assert found == {"h2"}
  assert asked == {"h2": [2222, 2223], "h3": []}

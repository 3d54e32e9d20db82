"""The Horovod backend's check of Horovod's process-set interface patch.

On hosts whose names resolve to loopback an unpatched Horovod aborts in
hvd.init(); the backend refuses such a job in one line instead. These tests
fake that environment (no rig, no horovodrun); the real hosts are
tests/multihost/test_horovod_hosts.py.
"""
import os
import sys

import pytest

from estimator_scale import errors
from estimator_scale.backends.horovod import ranks


GLOO_RANK = {"HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.1", "HOROVOD_RANK": "1",
             "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_SIZE": "1",
             "HOROVOD_HOSTNAME": "host2"}


def _check(environ, address, marker):
  ranks.check_process_set_interface(
      environ, resolve=lambda: ("host2", address), marker=str(marker))


def test_unpatched_horovod_on_a_loopback_name_is_refused_before_init(
    tmp_path):
  with pytest.raises(errors.TopologyError) as raised:
    _check(GLOO_RANK, "127.0.1.1", tmp_path / "absent")
  message = str(raised.value)
  assert "\n" not in message
  assert message.startswith("Horovod rank 1 on host2: the host name host2 "
                            "resolves to 127.0.1.1 (loopback)")
  assert "process_set_iface.patch" in message and "`make setup`" in message
  empty = tmp_path / "empty"
  empty.write_text("")
  with pytest.raises(errors.TopologyError):
    _check(GLOO_RANK, "127.0.0.1", empty)
  with pytest.raises(errors.TopologyError):
    _check(GLOO_RANK, "::1", tmp_path / "absent")


@pytest.mark.parametrize("case", [
    "patched", "own_address", "one_host", "not_gloo", "unresolved"])
def test_the_process_set_check_lets_every_other_job_through(tmp_path, case):
  marker = tmp_path / "absent"
  environ, address = dict(GLOO_RANK), "127.0.1.1"
  if case == "patched":
    marker = tmp_path / ".horovod-patch"
    marker.write_text("3231eb60c6a06bc8d7990bfee1f315ec273f68e6")
  elif case == "own_address":
    address = "10.77.0.2"
  elif case == "one_host":
    environ["HOROVOD_LOCAL_SIZE"] = "2"
  elif case == "not_gloo":  # mpirun sets no Gloo rendezvous
    del environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"]
  else:
    address = None
  _check(environ, address, marker)


def test_the_setups_horovod_is_known_as_patched():
  # tools/rig/setup_env.sh writes the patch's sum to $VENV/.horovod-patch after a
  # patched build; the backend reads it where this Python's prefix is.
  assert ranks.PATCH_MARKER == os.path.join(sys.prefix, ".horovod-patch")
  with open(ranks.PATCH_MARKER, encoding="utf-8") as f:
    assert f.read().strip()

"""The rig: hosts made on this machine by tools/rig/cluster.py, torn down after each test.

Needs root (network namespaces, mounts, an sshd per host). CI runs as root, so
the tests run there; anywhere else without root they skip, saying why. A rig
that cannot come up as root is a failure, not a skip.
"""
import os

import pytest

from tools.rig import cluster as cluster_lib


def _skip_without_root():
  if os.geteuid() != 0:
    pytest.skip("the multi-host rig needs root (network namespaces, mounts, sshd)")


@pytest.fixture
def needs_root():
  """Skips the test where it cannot make hosts (not root)."""
  _skip_without_root()


@pytest.fixture
def cluster():
  """cluster(n=2, **options) -> a started tools.rig.cluster.Cluster.

  Options are Cluster's (shape, loopback_hostname, local_disk, prefix). Every
  cluster made in a test is torn down after it, whatever the test did.
  """
  _skip_without_root()
  made = []

  def make(n=2, **options):
    made.append(cluster_lib.Cluster(n, **options))
    return made[-1].up()

  yield make
  for c in made:
    c.down()

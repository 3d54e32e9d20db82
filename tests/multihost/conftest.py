"""The rig: hosts made on this machine by tools/cluster.py, torn down after each test.

Needs root (network namespaces, mounts, an sshd per host). CI runs as root, so
the tests run there; anywhere else without root they skip, saying why. A rig
that cannot come up as root is a failure, not a skip.
"""
import os
import re
import subprocess
import time

import pytest

from tools import cluster as cluster_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_BIN = os.path.join(ROOT, ".venv", "bin")
# What runs in the hosts is named by absolute path: a command started over
# ssh gets sshd's environment (root's login PATH), not this process's.
PYTHON = os.path.join(VENV_BIN, "python")
HOROVODRUN = os.path.join(VENV_BIN, "horovodrun")


def require_root():
  if os.geteuid() != 0:
    pytest.skip("the multi-host rig needs root (network namespaces, mounts, sshd)")


@pytest.fixture
def cluster():
  """cluster(n=2, **options) -> a started tools.cluster.Cluster.

  Options are Cluster's (shape, loopback_hostname, local_disk, prefix). Every
  cluster made in a test is torn down after it, whatever the test did.
  """
  require_root()
  made = []

  def make(n=2, **options):
    made.append(cluster_lib.Cluster(n, **options))
    return made[-1].up()

  yield make
  for c in made:
    c.down()


def checkpoint_step(model_dir):
  """The latest checkpoint's step (-1: none yet), read without TensorFlow
  from the checkpoint state file."""
  try:
    with open(os.path.join(model_dir, "checkpoint"), encoding="utf-8") as f:
      latest = f.readline()
  except FileNotFoundError:
    return -1
  return int(re.search(r"model\.ckpt-(\d+)", latest).group(1))


def start_until_checkpoint(host, argv, model_dir, env, step=50, limit=240):
  """Starts `argv` from `host`; returns the process once model_dir holds a
  checkpoint of `step` or later, so that a fault after it leaves something
  to resume. The job's death before then fails the test with its output."""
  proc = host.popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, text=True)
  deadline = time.monotonic() + limit
  while checkpoint_step(model_dir) < step:
    assert proc.poll() is None, proc.communicate()[0][-4000:]
    assert time.monotonic() < deadline, f"no checkpoint after {limit} s"
    time.sleep(0.5)
  return proc


def job_processes(host):
  """The host's live processes that belong to a job: all but its sshd's
  (a zombie, already dead, has an empty command line)."""
  left = []
  for pid in host.pids():
    try:
      with open(f"/proc/{pid}/cmdline", "rb") as f:
        cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
    except FileNotFoundError:
      continue
    if cmdline and "sshd" not in cmdline:
      left.append(cmdline)
  return left

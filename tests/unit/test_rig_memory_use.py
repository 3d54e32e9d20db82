"""A rig host's memory ceiling read back, without a rig: what the cgroup's
files say, and the line that names a host whose process the OOM killer
took. tests/multihost/test_rig_memory.py caps a real host."""
import signal
import types

import pytest

from tools.rig import cluster as cluster_lib

MiB = cluster_lib.MiB


def _use(limit=200 * MiB, peak=150 * MiB, oom_kills=0, failcnt=0):
  return cluster_lib.MemoryUse(limit=limit, usage=0, peak=peak,
                               oom_kills=oom_kills, failcnt=failcnt)


def _group(tmp_path, limit=200 * MiB, oom_kill=1, memsw=True):
  """A directory laid out as a v1 memory cgroup's files."""
  files = {"memory.limit_in_bytes": limit, "memory.usage_in_bytes": 5 * MiB,
           "memory.max_usage_in_bytes": 180 * MiB, "memory.failcnt": 0,
           "memory.oom_control": ("oom_kill_disable 0\nunder_oom 0\n"
                                  f"oom_kill {oom_kill}\n")}
  if memsw:
    files.update({cluster_lib.MEMSW_LIMIT: limit, "memory.memsw.failcnt": 3})
  for name, value in files.items():
    (tmp_path / name).write_text(f"{value}\n")
  return str(tmp_path)


@pytest.mark.parametrize("code", [-signal.SIGKILL, 137, 255])
def test_a_sigkilled_process_of_a_host_that_counted_a_kill_is_named(code):
  line = cluster_lib.oom_line("host2", code, _use(oom_kills=1, peak=200 * MiB))
  assert line == ("host2: killed by the out-of-memory killer at its memory "
                  "ceiling of 200 MiB (peak 200 MiB)")


@pytest.mark.parametrize("code, use", [
    (1, _use(oom_kills=1)),  # not a death by SIGKILL
    (-signal.SIGKILL, _use(oom_kills=0)),  # SIGKILL from someone else
    (-signal.SIGKILL, None),  # a host without a memory cgroup
])
def test_no_line_without_both_a_sigkill_and_a_counted_kill(code, use):
  assert cluster_lib.oom_line("host2", code, use) is None


def test_only_a_kill_since_before_counts():
  before, after = _use(oom_kills=2), _use(oom_kills=2)
  assert cluster_lib.oom_line("host2", 137, after, before) is None
  assert cluster_lib.oom_line("host2", 137, _use(oom_kills=3), before)
  # A kernel without the count: a hit cap stands for the kill.
  old = _use(oom_kills=None, failcnt=4)
  assert not old.oom_killed_since(_use(oom_kills=None, failcnt=4))
  assert old.oom_killed_since(_use(oom_kills=None, failcnt=1))


def test_a_lifted_cap_is_said_so():
  line = cluster_lib.oom_line("host3", -9, _use(limit=None, oom_kills=1))
  assert line == ("host3: killed by the out-of-memory killer (no memory "
                  "ceiling now; peak 150 MiB)")


def test_the_cgroups_files_are_read_back(tmp_path):
  use = cluster_lib.read_memory_use(_group(tmp_path))
  assert use == cluster_lib.MemoryUse(limit=200 * MiB, usage=5 * MiB,
                                      peak=180 * MiB, oom_kills=1, failcnt=3)
  assert use.oom_killed
  unlimited = cluster_lib.read_memory_use(
      _group(tmp_path, limit=9223372036854771712, oom_kill=0))
  assert unlimited.limit is None and not unlimited.oom_killed
  assert cluster_lib.read_memory_use(str(tmp_path / "gone")) is None


@pytest.mark.parametrize("memsw", [True, False])
def test_a_cap_covers_swap_where_the_kernel_counts_it(tmp_path, memsw):
  group = _group(tmp_path, memsw=memsw)
  cluster_lib._write_memory_limit(group, 64 * MiB, "host2")  # pylint: disable=protected-access
  assert (tmp_path / "memory.limit_in_bytes").read_text() == str(64 * MiB)
  assert (tmp_path / cluster_lib.MEMSW_LIMIT).exists() == memsw
  if memsw:
    assert (tmp_path / cluster_lib.MEMSW_LIMIT).read_text() == str(64 * MiB)
  cluster_lib._write_memory_limit(group, None, "host2")  # pylint: disable=protected-access
  assert (tmp_path / "memory.limit_in_bytes").read_text() == "-1"


@pytest.mark.parametrize("limit", [0, -5, 1.5e8, True, "200M"])
def test_a_bad_limit_is_refused_naming_the_host(limit):
  rig = types.SimpleNamespace(name="t")
  host = cluster_lib.Host(rig, 2, "host2", "10.77.0.2", pid=1)
  with pytest.raises(cluster_lib.ClusterError,
                     match=r"host2: memory limit .*bytes > 0 \(an int\), or "
                     "None"):
    host.limit_memory(limit)


def test_status_shows_a_hosts_cap_peak_and_kills():
  status = cluster_lib._memory_status  # pylint: disable=protected-access
  assert status(None) == ""
  assert status(_use(oom_kills=2)) == (
      ", memory cap 200 MiB, peak 150 MiB, 2 OOM kills")

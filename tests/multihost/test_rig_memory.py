"""A rig host with a memory ceiling (tools/rig/cluster.py's limit_memory):
a job under it runs, a job over it dies as on a real host that size, by the
kernel's OOM killer, and the rig names the host and what it held.
"""
import glob
import subprocess
import sys

from tools.rig import cluster as cluster_lib

MiB = cluster_lib.MiB
CAP = 200 * MiB


def allocate(size):
  """A command holding `size` bytes, written so that every page counts."""
  return [sys.executable, "-c", f"b = b'x' * {size}; print('held')"]


def test_a_job_over_a_hosts_memory_ceiling_is_oom_killed_and_named(cluster):
  c = cluster(2)
  host1, host2 = c.hosts
  host2.limit_memory(CAP)
  # What ssh starts there later is born in the host's group.
  cgroups = host1.run(host2.ssh_command(["cat", "/proc/self/cgroup"]),
                      timeout=30).stdout
  assert f":memory:/{host2.netns}\n" in cgroups, cgroups

  under = host1.run(host2.ssh_command(allocate(100 * MiB)), timeout=30)
  assert (under.returncode, under.stdout) == (0, "held\n"), under.stderr
  use = host2.memory_use()
  assert 100 * MiB <= use.peak < CAP, use
  assert not use.oom_killed, use
  assert host2.why_killed(under.returncode) is None

  over = host1.run(host2.ssh_command(allocate(400 * MiB)), timeout=30)
  assert over.returncode in cluster_lib.KILLED_CODES, over
  assert over.stdout == ""
  after = host2.memory_use()
  assert after.oom_killed_since(use), after
  assert after.peak <= CAP, after  # never over its ceiling
  assert host2.why_killed(over.returncode, before=use) == (
      "host2: killed by the out-of-memory killer at its memory ceiling of "
      f"200 MiB (peak {after.peak / MiB:.0f} MiB)")
  assert host1.memory_use() is None  # only the capped host has a group
  # The host lives on: its sshd was not the biggest process.
  assert host1.run(host2.ssh_command("hostname"),
                   timeout=30).stdout == "host2\n"


def test_oom_kill_takes_the_hosts_biggest_process_and_lifts_the_cap_again(
    cluster):
  c = cluster(2)
  host1, host2 = c.hosts
  host2.limit_memory(None)  # a group, no cap: as the chaos driver arms it
  holder = host1.popen(
      host2.ssh_command([sys.executable, "-c", "import time; "
                         f"b = b'x' * {60 * MiB}; print('held', flush=True); "
                         "time.sleep(120)"]),
      stdout=subprocess.PIPE, text=True)
  assert holder.stdout.readline() == "held\n"
  taken = host2.oom_kill()
  assert "b = b'x' * " in taken and "MiB resident" in taken, taken
  assert holder.wait(timeout=30) in cluster_lib.KILLED_CODES
  use = host2.memory_use()
  assert use.oom_kills == 1 and use.limit is None, use
  assert host1.run(host2.ssh_command("hostname"),
                   timeout=30).stdout == "host2\n"
  c.down()
  assert not glob.glob(f"{cluster_lib.MEMORY_CGROUPS}/{host2.netns}")

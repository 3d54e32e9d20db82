"""A fault schedule of one's own for the chaos driver, without a rig: bad
entries are refused by number before any host is touched, and the driver
injects the entries in their order, skipping (and saying) one the job's
state does not allow when it comes. tests/multihost/test_chaos.py runs a
schedule on the rig."""
import types

import pytest

from tools.rig.chaos import core
from tools.rig.chaos import ps


def _rig(count):
  return types.SimpleNamespace(hosts=[
      types.SimpleNamespace(name=f"host{i}", index=i)
      for i in range(1, count + 1)])


class _Job(ps.PsChaos):
  """The parameter-server driver's choices with its faults recorded, not
  injected, and recovered at once."""

  def __init__(self, tmp_path):
    super().__init__(_rig(4), str(tmp_path), seed=0, gap=(0, 0))
    self.active = ["host2", "host3", "host4"]
    self._t0 = 0.0
    self.lines = []
    self.log = self.lines.append

  def now(self):
    return 0.0

  def _absorb(self, fault, new_session=None):
    del fault, new_session

  def _kill_host(self, host):
    self.active.remove(host)
    return core.Fault("kill_host", host, 0.0, 0.0)

  def _slow(self, host):
    return core.Fault("slow", host, 0.0, 0.0)

  def _heal(self):
    pass


@pytest.mark.parametrize("entry, named", [
    ({"kind": "kill_host"}, "after=None"),
    ({"after": -1, "kind": "kill_host"}, "after=-1"),
    ({"after": 1, "kind": "kill_rank"}, "kill_task, kill_host"),
    ({"after": 1, "kind": "slow", "host": "host9"}, "host1, host2"),
    ({"after": 1, "kind": "slow", "during": "merge"}, "moments are save"),
    ({"after": 1, "kind": "slow", "at": 3}, "unknown keys ['at']"),
])
def test_a_bad_entry_is_refused_by_its_number(tmp_path, entry, named):
  schedule = [{"after": 1, "kind": "slow"}, entry]
  with pytest.raises(ValueError, match="faults.json, fault 1: .*" +
                     named.replace("[", r"\[").replace("]", r"\]")):
    core.check_schedule(schedule, _Job(tmp_path), "faults.json")
  with pytest.raises(ValueError, match="a non-empty list"):
    core.check_schedule({}, _Job(tmp_path))


def test_the_entries_go_in_in_order_and_a_disallowed_one_is_skipped(
    tmp_path):
  job = _Job(tmp_path)
  job._calm_from = None  # pylint: disable=protected-access
  job.job_log = str(tmp_path / "job.log")
  (tmp_path / "job.log").write_text("")
  schedule = core.check_schedule([
      {"after": 0, "kind": "kill_host", "host": "host3"},
      # Two hosts left: the job's state allows no host to go out.
      {"after": 0, "kind": "kill_host"},
      {"after": 0, "kind": "slow"},
  ], job)
  job.run(60, schedule=schedule)
  assert [(f.kind, f.host) for f in job.faults] == [("kill_host", "host3"),
                                                    ("slow", "host2")]
  assert [s["kind"] for s in job.skipped] == ["kill_host"]
  assert "allows kill_task, pause, slow, disk_full" in job.skipped[0]["why"]
  assert any("scheduled kill_host  skipped" in line for line in job.lines)

"""A fault schedule of one's own for the chaos driver, without a rig: bad
entries are refused by number before any host is touched, and the driver
injects the entries in their order, skipping (and saying) one the job's
state does not allow when it comes. tests/multihost/test_chaos.py runs a
schedule on the rig."""
import types

import pytest

from tools.rig import chaos
from tools.rig.chaos import core
from tools.rig.chaos import ps


class _Host(types.SimpleNamespace):
  """A rig host that records its memory cgroup calls instead of making
  them."""

  def limit_memory(self, limit):
    self.calls.append(("limit_memory", limit))

  def oom_kill(self):
    self.calls.append(("oom_kill",))
    return "pid 7 (python -m tests.workers.position_run), 310 MiB resident"


def _rig(count):
  return types.SimpleNamespace(hosts=[
      _Host(name=f"host{i}", index=i, calls=[])
      for i in range(1, count + 1)])


class _Job(ps.PsChaos):
  """The parameter-server driver's choices with its faults recorded, not
  injected, and recovered at once."""

  def __init__(self, tmp_path, kinds=ps.KINDS):
    super().__init__(_rig(4), str(tmp_path), seed=0, gap=(0, 0), kinds=kinds)
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


def test_oom_is_drawn_only_when_asked_for_so_seeds_keep_their_faults():
  for kinds in chaos.BACKEND_KINDS.values():
    assert "oom" not in kinds
    assert core.choose_kinds(kinds) == kinds
  assert core.choose_kinds(ps.KINDS, ["kill_task", "oom"]) == (
      "kill_task", "oom")
  # A schedule asks for it by naming it.
  assert core.choose_kinds(ps.KINDS, None, [{"after": 1, "kind": "oom"}]) == (
      ps.KINDS + ("oom",))
  with pytest.raises(ValueError, match=r"kinds \['join'\]: this job's kinds "
                     "are kill_task, .*, disk_full, oom"):
    core.choose_kinds(ps.KINDS, ["join"])


def test_a_seed_draws_the_same_faults_as_before_oom_existed(tmp_path):
  def draws(kinds):
    job = _Job(tmp_path, kinds)
    return [job._draw() for _ in range(30)]  # pylint: disable=protected-access
  # The draws of ps.KINDS as listed before oom was added: the same.
  assert draws(core.choose_kinds(ps.KINDS)) == draws(
      ("kill_task", "kill_host", "link_down", "pause", "slow", "disk_full"))


def test_an_oom_fault_goes_in_restarts_the_job_and_says_what_it_took(
    tmp_path):
  job = _Job(tmp_path, core.choose_kinds(ps.KINDS, None, [{"kind": "oom"}]))
  job.job_log = str(tmp_path / "job.log")
  (tmp_path / "job.log").write_text("")
  job.arm_memory()
  assert all(h.calls == [("limit_memory", None)]
             for h in job.hosts.values())
  job.run(60, schedule=core.check_schedule(
      [{"after": 0, "kind": "oom", "host": "host3"}], job))
  assert [(f.kind, f.host) for f in job.faults] == [("oom", "host3")]
  assert job.faults[0].ended is not None  # the ceiling back
  assert job.hosts["host3"].calls[-1] == ("oom_kill",)
  assert "oom" in job.restarts
  assert any("oom host3: the OOM killer took pid 7 (python -m tests.workers"
             in line for line in job.lines), job.lines


def test_memory_cgroups_are_made_only_for_a_run_that_may_inject_oom(
    tmp_path):
  job = _Job(tmp_path)
  job.arm_memory()
  assert all(h.calls == [] for h in job.hosts.values())

"""--hosts: training slots per host, and hosts of parameter servers alone
(HOST:0), whose ps tasks then hold the host's memory by themselves."""
import pytest

from estimator_scale.launcher import hosts


def _placed(spec, ps):
  return [(t.job, t.index, t.host) for t in hosts.host_tasks(
      hosts.parse_hosts(spec, ps), ps, chief=True, port=2222)]


def test_parameter_servers_go_to_the_hosts_without_slots():
  assert _placed("a,b,c:0,d:0,e:0", 3) == [
      ("chief", 0, "a"), ("worker", 0, "b"), ("ps", 0, "c"), ("ps", 1, "d"),
      ("ps", 2, "e")]
  tasks = hosts.host_tasks(hosts.parse_hosts("a,b:0", 2), 2, True, 2222)
  assert [t.address for t in tasks] == ["a:2222", "b:2222", "b:2223"]


def test_without_such_hosts_they_go_round_all_of_them():
  assert _placed("a,b", 3) == [
      ("chief", 0, "a"), ("worker", 0, "b"), ("ps", 0, "a"), ("ps", 1, "b"),
      ("ps", 2, "a")]


@pytest.mark.parametrize("spec, ps, message", [
    ("a,b:0", 0, r"'b:0': a host with no slots runs parameter servers "
     r"alone; give --ps N"),
    ("a:0,b:0", 2, r"no slot for a training task"),
    ("a:x", 0, r"'a:x' is not HOST or HOST:SLOTS")])
def test_bad_hosts_are_refused_naming_the_entry(spec, ps, message):
  with pytest.raises(ValueError, match=message):
    hosts.parse_hosts(spec, ps)

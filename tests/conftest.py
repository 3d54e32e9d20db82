"""Fixtures and hooks for every test; shared helpers live in tests/helpers.

A test's kind is the directory it sits in: tests/unit (in-process),
tests/integration (real processes on this host), tests/multihost (the rig).
The hook below marks each test with its kind, so `pytest -m unit` and
`pytest tests/unit` select the same tests and no file declares its kind.
"""
import os
import resource
import time

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# In the order a run starts them: the rig's tests and the ones that start
# processes are the longest, and a long test started last would leave the
# other pytest workers idle; the in-process ones fill the gaps at the end.
_KINDS = ("multihost", "integration", "unit")


def _kind(item):
  tests = os.path.dirname(os.path.abspath(__file__))
  kind = os.path.relpath(str(item.path), tests).split(os.sep)[0]
  if kind not in _KINDS:
    raise pytest.UsageError(
        f"{item.nodeid}: a test file belongs in tests/unit, "
        "tests/integration or tests/multihost, which give it its kind")
  return kind


def pytest_collection_modifyitems(items):
  kinds = {item: _kind(item) for item in items}
  for item, kind in kinds.items():
    item.add_marker(kind)
  items.sort(key=lambda item: _KINDS.index(kinds[item]))


_CPU_AT_SETUP = pytest.StashKey[float]()
_STARTED = pytest.StashKey[float]()


def _cpu_seconds():
  """CPU of this process and of the processes it has waited for: processes
  started over ssh on the rig's hosts are not among them."""
  own = resource.getrusage(resource.RUSAGE_SELF)
  children = resource.getrusage(resource.RUSAGE_CHILDREN)
  return (own.ru_utime + own.ru_stime + children.ru_utime +
          children.ru_stime)


# `make test` keeps both cores busy, so a test's wall time says as much about
# what ran beside it as about the test: its CPU, kept in the JUnit XML
# (property cpu_seconds, fixtures counted in the first test that asks for
# them), is what it costs the run (tools/slowest_tests.py --by cpu). Its
# start (property started, Unix seconds) places it among the tests that
# ran beside it.
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
  item.stash[_CPU_AT_SETUP] = _cpu_seconds()
  item.stash[_STARTED] = time.time()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
  outcome = yield
  if call.when == "teardown" and _CPU_AT_SETUP in item.stash:
    outcome.get_result().user_properties.extend([
        ("cpu_seconds", round(_cpu_seconds() - item.stash[_CPU_AT_SETUP], 2)),
        ("started", round(item.stash[_STARTED], 1))])

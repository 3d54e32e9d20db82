"""Fixtures and hooks for every test; shared helpers live in tests/helpers.

A test's kind is the directory it sits in: tests/unit (in-process),
tests/integration (real processes on this host), tests/multihost (the rig).
The hook below marks each test with its kind, so `pytest -m unit` and
`pytest tests/unit` select the same tests and no file declares its kind.
"""
import os

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

"""Fixtures and hooks for every test; shared helpers live in tests/helpers.

A test's kind is the directory it sits in: tests/unit (in-process),
tests/integration (real processes on this host), tests/multihost (the rig).
The hook below marks each test with its kind, so `pytest -m unit` and
`pytest tests/unit` select the same tests and no file declares its kind.
"""
import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

_KINDS = ("unit", "integration", "multihost")

# Cases `make test` leaves to `make test-all`: on a 2-core machine the whole
# suite nears CI's time limit, and each of these repeats, on another network
# style or backend, what a sibling case that still runs checks (the same
# test's remaining parameters, or the rig's tests of the same backend).
_EXTENDED = (
    "tests/integration/test_canned_multiprocess.py::"
    "test_canned_wide_deep_matches_one_process[multi_worker_mirrored]",
    "tests/integration/test_canned_multiprocess.py::"
    "test_canned_wide_deep_matches_one_process[parameter_server]",
    "tests/integration/test_feature_columns_multiprocess.py::"
    "test_feature_columns_accumulate_exactly_on_every_backend[lookup_tables]",
    "tests/integration/test_feature_columns_multiprocess.py::"
    "test_feature_columns_accumulate_exactly_on_every_backend"
    "[shared_embeddings]",
    "tests/integration/test_input_position_multiprocess.py::"
    "test_two_restarts_in_an_epoch_then_another_worker_count"
    "[multi_worker_mirrored-2-then2]",
    "tests/integration/test_multiprocess.py::"
    "test_adascale_golden_gains_in_every_mode[mirrored]",
    "tests/integration/test_multiprocess.py::"
    "test_adascale_golden_gains_in_every_mode[multi_worker_mirrored]",
    "tests/integration/test_multiprocess.py::"
    "test_micro_batches_equal_one_large_batch_on_every_backend[keras]",
    "tests/integration/test_multiprocess.py::"
    "test_micro_batches_equal_one_large_batch_on_every_backend[keras_model]",
    "tests/integration/test_multiprocess.py::"
    "test_micro_batches_equal_one_large_batch_on_every_backend[autoencoder]",
)


def pytest_collection_modifyitems(items):
  tests = os.path.dirname(os.path.abspath(__file__))
  for item in items:
    kind = os.path.relpath(str(item.path), tests).split(os.sep)[0]
    if kind not in _KINDS:
      raise pytest.UsageError(
          f"{item.nodeid}: a test file belongs in tests/unit, "
          "tests/integration or tests/multihost, which give it its kind")
    item.add_marker(kind)
    if os.path.relpath(str(item.path), os.path.dirname(tests)).replace(
        os.sep, "/") + "::" + item.name in _EXTENDED:
      item.add_marker("extended")


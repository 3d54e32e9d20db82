"""What several test files share: process runners, results, checkpoints.

Test modules import these helpers and never each other, so that moving or
deleting one test file cannot break another. conftest.py files keep only
fixtures and hooks.
"""

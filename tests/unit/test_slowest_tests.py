"""tools.slowest_tests reads the JUnit XML `make test` writes."""
import os
import shutil
import subprocess
import sys

from tests.helpers.processes import ROOT
from tools import slowest_tests

_JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="3">
<testcase classname="tests.unit.test_a" name="test_quick" time="0.5"/>
<testcase classname="tests.integration.test_b" name="test_slow[horovod]"
          time="91.25"><properties>
  <property name="cpu_seconds" value="12.5"/></properties></testcase>
<testcase classname="tests.unit.test_a" name="test_middle" time="7">
  <properties><property name="cpu_seconds" value="30.25"/></properties>
</testcase>
</testsuite></testsuites>
"""


def test_slowest_first_and_at_most_the_number_asked(tmp_path):
  path = tmp_path / "junit.xml"
  path.write_text(_JUNIT)
  assert slowest_tests.slowest(str(path), 2) == [
      (91.25, "tests.integration.test_b::test_slow[horovod]"),
      (7.0, "tests.unit.test_a::test_middle")]


def test_by_cpu_the_test_that_used_the_most_cpu_comes_first(tmp_path):
  path = tmp_path / "junit.xml"
  path.write_text(_JUNIT)
  assert slowest_tests.slowest(str(path), 3, by="cpu") == [
      (30.25, "tests.unit.test_a::test_middle"),
      (12.5, "tests.integration.test_b::test_slow[horovod]"),
      (0.0, "tests.unit.test_a::test_quick")]


def test_the_suite_records_each_tests_cpu_in_the_junit_xml(tmp_path):
  """A test whose child process spins for a second: its CPU, not its wall
  time's share of the machine, is what it cost."""
  shutil.copy(os.path.join(ROOT, "tests", "conftest.py"), tmp_path)
  (tmp_path / "unit").mkdir()  # the conftest takes a test's kind from here
  (tmp_path / "unit" / "test_spin.py").write_text(
      "import subprocess, sys\n"
      "def test_spin():\n"
      "  subprocess.run([sys.executable, '-c', 'import time\\n"
      "t = time.process_time()\\nwhile time.process_time() - t < 1: pass'],"
      " check=True)\n")
  junit = tmp_path / "junit.xml"
  proc = subprocess.run(
      [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
       f"--junitxml={junit}", "unit"], cwd=tmp_path, capture_output=True,
      text=True, check=False)
  assert proc.returncode == 0, proc.stdout[-3000:]
  ((cpu, test),) = slowest_tests.slowest(str(junit), 1, by="cpu")
  assert test.endswith("::test_spin")
  assert 1.0 <= cpu < 5.0


def test_a_missing_file_names_it_and_the_command_that_writes_it(tmp_path):
  missing = tmp_path / "none.xml"
  proc = subprocess.run([sys.executable, "-m", "tools.slowest_tests",
                         str(missing)], capture_output=True, text=True,
                        check=False)
  assert proc.returncode != 0
  assert str(missing) in proc.stderr and "make test" in proc.stderr

"""tools.slowest_tests reads the JUnit XML `make test` writes."""
import subprocess
import sys

from tools import slowest_tests

_JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="3">
<testcase classname="tests.unit.test_a" name="test_quick" time="0.5"/>
<testcase classname="tests.integration.test_b" name="test_slow[horovod]"
          time="91.25"/>
<testcase classname="tests.unit.test_a" name="test_middle" time="7"/>
</testsuite></testsuites>
"""


def test_slowest_first_and_at_most_the_number_asked(tmp_path):
  path = tmp_path / "junit.xml"
  path.write_text(_JUNIT)
  assert slowest_tests.slowest(str(path), 2) == [
      (91.25, "tests.integration.test_b::test_slow[horovod]"),
      (7.0, "tests.unit.test_a::test_middle")]


def test_a_missing_file_names_it_and_the_command_that_writes_it(tmp_path):
  missing = tmp_path / "none.xml"
  proc = subprocess.run([sys.executable, "-m", "tools.slowest_tests",
                         str(missing)], capture_output=True, text=True,
                        check=False)
  assert proc.returncode != 0
  assert str(missing) in proc.stderr and "make test" in proc.stderr

"""Lists a test run's slowest tests from the JUnit XML `make test` writes.

`make test` keeps each test's duration and CPU seconds in
test-results/junit.xml so that a test that grew slow shows up in the next
run's list, not only in the lines pytest printed then and CI's log has since
dropped. On a machine the run keeps busy, CPU (`--by cpu`) is what a test
costs the run; its wall time also counts what ran beside it.

  python -m tools.slowest_tests [test-results/junit.xml] [--most 25]
      [--by time|cpu]
"""
import argparse
import sys
import xml.etree.ElementTree as ElementTree


def _seconds(case, by):
  if by == "time":
    return float(case.get("time", 0))
  cpu = case.find("properties/property[@name='cpu_seconds']")
  return float(cpu.get("value")) if cpu is not None else 0.0


def slowest(path, most, by="time"):
  """[(seconds, test id)] of the `most` test cases in `path` that took the
  most wall seconds (`by="time"`) or CPU seconds (`by="cpu"`)."""
  cases = ElementTree.parse(path).iter("testcase")
  timed = [(_seconds(case, by),
            f"{case.get('classname')}::{case.get('name')}") for case in cases]
  return sorted(timed, reverse=True)[:most]


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("junit_xml", nargs="?",
                      default="test-results/junit.xml")
  parser.add_argument("--most", type=int, default=25)
  parser.add_argument("--by", choices=("time", "cpu"), default="time")
  args = parser.parse_args(argv)
  try:
    rows = slowest(args.junit_xml, args.most, args.by)
  except (OSError, ElementTree.ParseError) as e:
    sys.exit(f"slowest_tests: cannot read {args.junit_xml} ({e}); "
             "`make test` writes it")
  for seconds, test in rows:
    print(f"{seconds:8.1f} {'s' if args.by == 'time' else 'CPU-s'}  {test}")


if __name__ == "__main__":
  main()

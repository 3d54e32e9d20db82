"""Lists a test run's slowest tests from the JUnit XML `make test` writes.

`make test` keeps each test's duration in test-results/junit.xml so that a
test that grew slow shows up in the next run's list, not only in the lines
pytest printed then and CI's log has since dropped.

  python -m tools.slowest_tests [test-results/junit.xml] [--most 25]
"""
import argparse
import sys
import xml.etree.ElementTree as ElementTree


def slowest(path, most):
  """[(seconds, test id)] of the `most` slowest test cases in `path`."""
  cases = ElementTree.parse(path).iter("testcase")
  timed = [(float(case.get("time", 0)),
            f"{case.get('classname')}::{case.get('name')}") for case in cases]
  return sorted(timed, reverse=True)[:most]


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("junit_xml", nargs="?",
                      default="test-results/junit.xml")
  parser.add_argument("--most", type=int, default=25)
  args = parser.parse_args(argv)
  try:
    rows = slowest(args.junit_xml, args.most)
  except (OSError, ElementTree.ParseError) as e:
    sys.exit(f"slowest_tests: cannot read {args.junit_xml} ({e}); "
             "`make test` writes it")
  for seconds, test in rows:
    print(f"{seconds:8.1f} s  {test}")


if __name__ == "__main__":
  main()

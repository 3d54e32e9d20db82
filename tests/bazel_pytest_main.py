"""Main of every Bazel py_test made by tests/defs.bzl: run pytest on the given files.

Bazel runs `bazel_pytest_main.py tests/unit/test_x.py [pytest args]` from the
runfiles tree; this runs pytest there and exits with pytest's exit code, so a
failing or erroring test (or a file that collects nothing) fails the target.
It also honours Bazel's test protocol: JUnit XML goes to $XML_OUTPUT_FILE and
`bazel test --test_filter=EXPR` becomes `pytest -k EXPR`.
"""
import os
import sys


def pytest_args(argv, environ):
    """The pytest command line for Bazel's argv and test environment."""
    args = [
        "-p", "no:cacheprovider",  # the runfiles tree is not ours to write into
        "-ra",
        "--rootdir", os.getcwd(),
    ]
    xml_output = environ.get("XML_OUTPUT_FILE")
    if xml_output:
        args += ["--junitxml", xml_output]
    test_filter = environ.get("TESTBRIDGE_TEST_ONLY")
    if test_filter:
        args += ["-k", test_filter]
    return args + list(argv)


def drop_source_tree(path_entries, source_root):
    """sys.path without the source checkout itself.

    `pip install -e .` (tools/rig/setup_env.sh) puts the checkout on sys.path through
    a .pth file; under Bazel every import must come from the runfiles, so that a
    dependency missing from a BUILD file fails here instead of being found there.
    """
    source_root = os.path.realpath(source_root)
    return [p for p in path_entries if os.path.realpath(p or ".") != source_root]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: bazel_pytest_main.py TEST_FILE... [PYTEST_ARGS]", file=sys.stderr)
        return 2
    # Bazel gives each test a private TEST_TMPDIR but no HOME and TMPDIR=/tmp:
    # point both into it so temp files, ~/.keras and matplotlib's cache stay per test.
    test_tmpdir = os.environ.get("TEST_TMPDIR")
    if test_tmpdir:
        os.environ["TMPDIR"] = test_tmpdir
        os.environ.setdefault("HOME", os.path.join(test_tmpdir, "home"))
        os.makedirs(os.environ["HOME"], exist_ok=True)
        os.environ.setdefault("MPLCONFIGDIR", os.path.join(test_tmpdir, "matplotlib"))
    if os.environ.get("TEST_SRCDIR"):  # under `bazel test`
        here = os.path.realpath(__file__)  # the runfiles link resolves to the checkout
        sys.path[:] = drop_source_tree(sys.path, os.path.dirname(os.path.dirname(here)))
    print("bazel_pytest_main: python %s (%s)" % (sys.executable, sys.version.split()[0]))
    import pytest  # imported late: the interpreter line above helps when this fails

    return int(pytest.main(pytest_args(argv, os.environ)))


if __name__ == "__main__":
    sys.exit(main())

"""pytest-style tests as Bazel py_test targets.

Every py_test here runs //tests:bazel_pytest_main.py, which hands its test
file(s) to pytest and exits with pytest's code. tests/test_bazel_build.py
evaluates this file (as Python, with stand-ins for `native`) to check that every
.py file in the repository belongs to some target, so keep it plain Starlark.
"""

PYTEST_MAIN = "//tests:bazel_pytest_main.py"

# What every test may import: the package, the model zoo, the tools, shared test
# helpers (conftest.py and friends) and the repository's pytest configuration.
COMMON_DEPS = [
    "//estimator_scale",
    "//model_zoo",
    "//tools",
    "//tests:test_support",
]

COMMON_DATA = ["//:pytest_config"]

def pytest_test(name, srcs, deps = [], data = [], args = [], tags = [], **kwargs):
    """One py_test that runs pytest on `srcs` (test_*.py files)."""
    native.py_test(
        name = name,
        srcs = srcs + [PYTEST_MAIN],
        main = PYTEST_MAIN,
        args = ["$(rootpath %s)" % src for src in srcs] + args,
        data = data + COMMON_DATA,
        deps = deps + COMMON_DEPS,
        python_version = "PY3",
        srcs_version = "PY3",
        tags = tags + ["pytest"],
        **kwargs
    )

def pytest_tests(exclude = [], deps = [], overrides = {}):
    """A pytest_test for each test_*.py under tests/ not matched by `exclude`.

    The target is named after the file's path without ".py" (test_x, sub/test_y). `overrides` maps a file
    name to extra pytest_test arguments (size, tags, shard_count, ...).
    """
    for src in native.glob(["**/test_*.py"], exclude = exclude):
        pytest_test(
            name = src[:-len(".py")],
            srcs = [src],
            deps = deps,
            **overrides.get(src, {})
        )

"""pytest-style tests as Bazel py_test targets.

Every py_test here runs //tests:bazel_pytest_main.py, which hands its test
file(s) to pytest and exits with pytest's code. tests/unit/test_bazel_build.py
evaluates this file (as Python, with stand-ins for `native`) to check that every
.py file in the repository belongs to some target, so keep it plain Starlark.
"""

PYTEST_MAIN = "//tests:bazel_pytest_main.py"

# What every test may import: the package, the model zoo, the tools, the shared
# test helpers and workers, and the conftest.py that marks each test's kind.
COMMON_DEPS = [
    "//estimator_scale",
    "//model_zoo",
    "//tools",
    "//tests:conftest",
    "//tests/helpers",
    "//tests/workers",
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

def pytest_tests(deps = [], tags = [], overrides = {}):
    """A pytest_test for each test_*.py of the calling package.

    The target is named after the file without ".py". `tags` go on every
    target ("manual" keeps a kind out of `bazel test //...`); `overrides` maps
    a file name to extra pytest_test arguments (size, tags, shard_count, ...).
    """
    for src in native.glob(["test_*.py"]):
        extra = dict(overrides.get(src, {}))
        pytest_test(
            name = src[:-len(".py")],
            srcs = [src],
            deps = deps,
            tags = tags + extra.pop("tags", []),
            **extra
        )

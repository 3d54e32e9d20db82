"""Drift test for the Bazel build: every .py file belongs to some target.

BUILD and .bzl files are Starlark, which for what this repository uses is a
subset of Python. So this test executes each BUILD file under SOURCE_ROOTS as
Python, with stand-ins that record the rules it declares, evaluates glob() the
way Bazel does (`*` stays inside one directory, `**` spans any number of them,
sub-packages are skipped), and runs the macros of loaded .bzl files
(tests/defs.bzl) with a recording `native`. A .py file is covered when it is in
the srcs (or is the main) of a py_library, py_binary or py_test. Tests split by
directory under Bazel as under pytest: tests/unit's py_tests run by default,
the other kinds' are tagged "manual", and no unit test starts a multi-process
job.

No Bazel needed: it runs under plain pytest in a second, and under Bazel too
(it follows its own symlink back to the source tree).
"""
import ast
import fnmatch
import os
import shutil
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCE_ROOTS = ("estimator_scale", "model_zoo", "tools", "tests")
BUILD_NAMES = ("BUILD", "BUILD.bazel")
PY_RULES = ("py_library", "py_binary", "py_test")
# Rules a BUILD file here may declare that own no Python sources.
OTHER_RULES = (
    "alias", "config_setting", "filegroup", "genrule", "py_runtime",
    "sh_binary", "sh_library", "sh_test", "test_suite", "toolchain",
)
SKIPPED_DIRS = ("__pycache__", ".pytest_cache")


# --------------------------------------------------------------------------
# glob() with Bazel's semantics


def _glob_match(pattern_parts, path_parts):
    if not pattern_parts:
        return not path_parts
    head, rest = pattern_parts[0], pattern_parts[1:]
    if head == "**":
        return any(_glob_match(rest, path_parts[i:]) for i in range(len(path_parts) + 1))
    return (bool(path_parts) and fnmatch.fnmatchcase(path_parts[0], head)
            and _glob_match(rest, path_parts[1:]))


def glob_match(pattern, relpath):
    """Whether package-relative `relpath` ("a/b.py") matches a Bazel glob pattern."""
    return _glob_match(pattern.split("/"), relpath.split("/"))


def package_files(package_dir):
    """Files of the package at package_dir, relative to it, without sub-packages."""
    found = []
    for dirpath, dirnames, filenames in os.walk(package_dir):
        here = Path(dirpath)
        dirnames[:] = sorted(
            d for d in dirnames
            if d not in SKIPPED_DIRS
            and not any((here / d / b).is_file() for b in BUILD_NAMES))
        found += [(here / f).relative_to(package_dir).as_posix() for f in filenames]
    return sorted(found)


def bazel_glob(package_dir, include, exclude=()):
    return [f for f in package_files(package_dir)
            if any(glob_match(p, f) for p in include)
            and not any(glob_match(p, f) for p in exclude)]


# --------------------------------------------------------------------------
# Evaluating BUILD files


class Target:
    def __init__(self, kind, package, attrs):
        self.kind = kind
        self.package = package
        self.name = attrs.get("name")
        self.attrs = attrs

    def __repr__(self):
        return "%s(//%s:%s)" % (self.kind, self.package, self.name)


def _flatten(value):
    """srcs may be a list, a select() stand-in (dict) or a single label."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [label for choice in value.values() for label in _flatten(choice)]
    return [label for item in value for label in _flatten(item)]


class Workspace:
    """The rules declared by every BUILD file under `root`'s SOURCE_ROOTS."""

    def __init__(self, root):
        self.root = Path(root)
        self.targets = []
        self.build_files = []
        self._package = None
        self._bzl_modules = {}
        for build_file in self._find_build_files():
            self._load_package(build_file)

    # -- files and labels ---------------------------------------------------

    def _find_build_files(self):
        found = []
        for top in SOURCE_ROOTS:
            for dirpath, dirnames, filenames in os.walk(self.root / top):
                dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
                found += [Path(dirpath) / b for b in BUILD_NAMES if b in filenames]
        return found

    def label_path(self, package, label):
        """Repository-relative path a file label names (None for another repo)."""
        if label.startswith("@"):
            return None
        if label.startswith("//"):
            package, _, name = label[2:].partition(":")
            name = name or package.rsplit("/", 1)[-1]
        else:
            name = label[1:] if label.startswith(":") else label
        return (Path(package) / name).as_posix() if package else name

    # -- evaluation ---------------------------------------------------------

    def _record(self, kind):
        def rule(**attrs):
            self.targets.append(Target(kind, self._package, attrs))
        rule.__name__ = kind
        return rule

    def _glob(self, include, exclude=(), exclude_directories=1, allow_empty=True):
        del exclude_directories, allow_empty
        return bazel_glob(self.root / self._package, include, exclude)

    def _builtins(self):
        names = {kind: self._record(kind) for kind in PY_RULES + OTHER_RULES}

        def ignore(*args, **kwargs):
            return None

        def fail(msg="", *args):
            raise AssertionError("fail() in %s: %s" % (self._package, msg))

        names.update(
            glob=self._glob,
            package=ignore,
            licenses=ignore,
            exports_files=ignore,
            select=lambda choices, no_match_error="": dict(choices),
            Label=str,
            fail=fail,
            struct=types.SimpleNamespace,
            package_name=lambda: self._package,
        )
        return names

    def _native(self):
        return types.SimpleNamespace(**self._builtins())

    def _load_bzl(self, package, label):
        path = self.label_path(package, label)
        if path not in self._bzl_modules:
            module = {"native": self._native()}
            module.update({k: v for k, v in self._builtins().items()
                           if k in ("select", "Label", "fail", "struct")})
            module["load"] = self._loader(package, module)
            source = (self.root / path).read_text()
            exec(compile(source, str(self.root / path), "exec"), module)
            self._bzl_modules[path] = module
        return self._bzl_modules[path]

    def _loader(self, package, namespace):
        def load(label, *symbols, **aliases):
            if label.startswith("@"):  # e.g. @bazel_tools: rules we do not inspect
                for local in list(symbols) + list(aliases):
                    namespace[local] = self._record(local)
                return
            module = self._load_bzl(package, label)
            for symbol in symbols:
                namespace[symbol] = module[symbol]
            for local, symbol in aliases.items():
                namespace[local] = module[symbol]
        return load

    def _load_package(self, build_file):
        self._package = build_file.parent.relative_to(self.root).as_posix()
        self.build_files.append(build_file)
        namespace = self._builtins()
        namespace["load"] = self._loader(self._package, namespace)
        exec(compile(build_file.read_text(), str(build_file), "exec"), namespace)

    # -- queries ------------------------------------------------------------

    def sources(self, target):
        """Repository-relative paths in a target's srcs and main."""
        labels = _flatten(target.attrs.get("srcs")) + _flatten(target.attrs.get("main"))
        paths = (self.label_path(target.package, label) for label in labels)
        return {p for p in paths if p is not None}

    def python_targets(self):
        return [t for t in self.targets if t.kind in PY_RULES]

    def default_tests(self):
        """The py_tests `bazel test //...` runs: those not tagged "manual"."""
        return [t for t in self.targets if t.kind == "py_test"
                and "manual" not in (t.attrs.get("tags") or [])]

    def covered(self):
        return set().union(*(self.sources(t) for t in self.python_targets()))

    def generated(self):
        outs = set()
        for target in self.targets:
            if target.kind == "genrule":
                outs |= {self.label_path(target.package, o)
                         for o in _flatten(target.attrs.get("outs"))}
        return outs


def python_files(root):
    """Every .py file under the SOURCE_ROOTS of `root`, repository-relative."""
    root = Path(root)
    found = []
    for top in SOURCE_ROOTS:
        for dirpath, dirnames, filenames in os.walk(root / top):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
            found += [(Path(dirpath) / f).relative_to(root).as_posix()
                      for f in filenames if f.endswith(".py")]
    return sorted(found)


def uncovered_python_files(root):
    """The .py files under `root` that no target accounts for."""
    covered = Workspace(root).covered()
    return [f for f in python_files(root) if f not in covered]


# --------------------------------------------------------------------------
# The checks on this repository

pytestmark = pytest.mark.skipif(
    not (REPO / "WORKSPACE").is_file(), reason="source tree with WORKSPACE not found")


def test_every_python_file_belongs_to_a_bazel_target():
    missing = uncovered_python_files(REPO)
    assert not missing, (
        "These .py files are in no Bazel target (add them to a py_library / "
        "py_binary / py_test srcs; a test file belongs in tests/unit, "
        "tests/integration or tests/multihost):\n  " + "\n  ".join(missing))


def test_each_source_folder_is_a_bazel_package():
    workspace = Workspace(REPO)
    packages = {t.package for t in workspace.python_targets()}
    for folder in ("estimator_scale", "estimator_scale/train_ops",
                   "estimator_scale/backends", "model_zoo",
                   "tools", "tests", "tests/helpers", "tests/workers",
                   "tests/unit", "tests/integration", "tests/multihost"):
        if (REPO / folder).is_dir():
            assert folder in packages, "%s/BUILD declares no Python target" % folder


def test_every_listed_source_exists():
    workspace = Workspace(REPO)
    generated = workspace.generated()
    missing = sorted(
        "%r: %s" % (target, path)
        for target in workspace.python_targets()
        for path in workspace.sources(target)
        if path.endswith(".py") and path not in generated
        and not (REPO / path).is_file())
    assert not missing, "BUILD files name .py files that do not exist:\n  " + "\n  ".join(missing)


def test_py_tests_run_pytest_and_only_unit_tests_run_by_default():
    workspace = Workspace(REPO)
    tests = [t for t in workspace.python_targets() if t.kind == "py_test"]
    assert any(t.name == "test_bazel_build" for t in tests), tests
    for target in tests:
        assert workspace.label_path(target.package, target.attrs["main"]) == \
            "tests/bazel_pytest_main.py", target
    default = workspace.default_tests()
    assert {t.package for t in default} == {"tests/unit"}, default
    unit_files = {f for f in python_files(REPO)
                  if f.startswith("tests/unit/test_")}
    assert set().union(*(workspace.sources(t) for t in default)) == (
        unit_files | {"tests/bazel_pytest_main.py"})


# Helpers that start real multi-process jobs (horovodrun ranks,
# estimator-scale-launch's TF_CONFIG workers, the rig's jobs): a test file
# using one belongs in tests/integration or tests/multihost.
MULTI_PROCESS_HELPERS = {"horovod", "horovodrun", "horovodrun_argv", "launch",
                         "launch_argv",
                         "HOROVODRUN"}
_HELPER_MODULES = ("processes", "rig")


def multi_process_helpers_used(path):
    """Names of MULTI_PROCESS_HELPERS a test file takes from tests/helpers."""
    used = set()
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if (isinstance(node, ast.ImportFrom)
                and (node.module or "").endswith(_HELPER_MODULES)):
            used |= {a.name for a in node.names} & MULTI_PROCESS_HELPERS
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id in _HELPER_MODULES
              and node.attr in MULTI_PROCESS_HELPERS):
            used.add(node.attr)
    return used


def test_unit_tests_start_no_multi_process_job():
    workspace = Workspace(REPO)
    offenders = sorted(
        "%s uses %s" % (path, ", ".join(sorted(helpers)))
        for target in workspace.default_tests()
        for path in workspace.sources(target)
        if path.endswith(".py") and (REPO / path).is_file()
        for helpers in [multi_process_helpers_used(REPO / path)] if helpers)
    assert not offenders, (
        "These unit tests start multi-process jobs; move them to "
        "tests/integration:\n  " + "\n  ".join(offenders))


# --------------------------------------------------------------------------
# Tests of the checker itself, on a copy of the repository's BUILD/.bzl/.py files


def _copy_sources(tmp_path):
    def ignore(directory, names):
        return [n for n in names
                if n in SKIPPED_DIRS or (Path(directory, n).is_file()
                                         and not n.endswith((".py", ".bzl"))
                                         and n not in BUILD_NAMES)]

    for top in SOURCE_ROOTS:
        if (REPO / top).is_dir():
            shutil.copytree(REPO / top, tmp_path / top, ignore=ignore)
    (tmp_path / "WORKSPACE").write_text('workspace(name = "estimator_scale")\n')
    return tmp_path


def remove_call(build_text, func=None, name=None):
    """build_text without the top-level call of `func` and/or named `name`."""
    tree = ast.parse(build_text)
    lines = build_text.splitlines(keepends=True)
    for node in tree.body:
        call = node.value if isinstance(node, ast.Expr) else None
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
            continue
        names = [k.value.value for k in call.keywords
                 if k.arg == "name" and isinstance(k.value, ast.Constant)]
        if (func is None or call.func.id == func) and (name is None or name in names):
            return "".join(lines[:node.lineno - 1] + lines[node.end_lineno:])
    raise AssertionError("no call %s(name=%r) in BUILD file" % (func, name))


def test_multi_process_helper_detection(tmp_path):
    (tmp_path / "a.py").write_text(
        "from tests.helpers.processes import PYTHON, horovod\n")
    (tmp_path / "b.py").write_text(
        "from tests.helpers import processes\nprocesses.launch(2, [])\n")
    (tmp_path / "c.py").write_text(
        "from tests.helpers.processes import PYTHON, run\n")
    assert multi_process_helpers_used(tmp_path / "a.py") == {"horovod"}
    assert multi_process_helpers_used(tmp_path / "b.py") == {"launch"}
    assert multi_process_helpers_used(tmp_path / "c.py") == set()


def test_glob_semantics():
    assert glob_match("*.py", "a.py")
    assert not glob_match("*.py", "sub/a.py")
    assert glob_match("**/*.py", "a.py")
    assert glob_match("**/*.py", "sub/deeper/a.py")
    assert glob_match("test_*.py", "test_inputs.py")
    assert not glob_match("test_*.py", "unit/test_inputs.py")
    assert glob_match("**/test_*x*.py", "a/test_box.py")
    assert not glob_match("**/test_*x*.py", "a/test_bo.py")


# These tests check the checker on a copy; any drift already in the tree is
# reported by test_every_python_file_belongs_to_a_bazel_target alone, so they
# compare against the copy's own starting point.


def test_checker_passes_on_a_copy_and_sees_new_files(tmp_path):
    root = _copy_sources(tmp_path)
    baseline = uncovered_python_files(root)
    # New modules and tests are picked up by the globs without editing BUILD;
    # a test's directory decides whether `bazel test //...` runs it.
    (root / "estimator_scale" / "brand_new_module.py").write_text("X = 1\n")
    (root / "tests" / "unit" / "test_brand_new_feature.py").write_text(
        "def test_x():\n    pass\n")
    (root / "tests" / "integration" / "test_brand_new_job.py").write_text("")
    (root / "tests" / "helpers" / "brand_new_helper.py").write_text("")
    assert uncovered_python_files(root) == baseline
    workspace = Workspace(root)
    default = {t.name for t in workspace.default_tests()}
    every = {t.name for t in workspace.python_targets() if t.kind == "py_test"}
    assert "test_brand_new_feature" in default
    assert "test_brand_new_job" in every - default
    # A test file outside the kinds' directories is in no target.
    (root / "tests" / "test_kindless.py").write_text("")
    assert uncovered_python_files(root) == sorted(
        baseline + ["tests/test_kindless.py"])


def test_checker_reports_files_in_a_folder_without_build(tmp_path):
    root = _copy_sources(tmp_path)
    baseline = uncovered_python_files(root)
    (root / "estimator_scale" / "orphan_pkg").mkdir()
    (root / "estimator_scale" / "orphan_pkg" / "BUILD").write_text("")
    (root / "estimator_scale" / "orphan_pkg" / "mod.py").write_text("")
    assert sorted(set(uncovered_python_files(root)) - set(baseline)) == [
        "estimator_scale/orphan_pkg/mod.py"]


@pytest.mark.parametrize("package, func, name", [
    ("estimator_scale", "py_library", "estimator_scale"),
    ("estimator_scale/train_ops", "py_library", "train_ops"),
    ("model_zoo", "py_library", "model_zoo"),
    ("tests/unit", "pytest_tests", None),
    ("tests/helpers", "py_library", "helpers"),
])
def test_removing_a_target_makes_the_checker_fail(tmp_path, package, func, name):
    root = _copy_sources(tmp_path)
    if not (root / package / "BUILD").is_file():
        pytest.skip("%s/BUILD not in this tree" % package)
    def removed(target):  # the targets that call makes: one library, or all py_tests
        return target.package == package and (
            target.name == name if name else target.kind == "py_test")

    baseline = set(uncovered_python_files(root))
    before = Workspace(root)
    kept = set().union(*(before.sources(t) for t in before.python_targets() if not removed(t)))
    owned = set().union(*(before.sources(t) for t in before.python_targets() if removed(t)))
    expected = sorted(f for f in owned - kept if f in python_files(root))
    if not expected:  # a package with no modules yet: give it one its glob picks up
        added = "test_added.py" if func == "pytest_tests" else "added_for_test.py"
        (root / package / added).write_text("")
        expected = ["%s/%s" % (package, added)]

    build = root / package / "BUILD"
    build.write_text(remove_call(build.read_text(), func=func, name=name))
    assert sorted(set(uncovered_python_files(root)) - baseline) == expected

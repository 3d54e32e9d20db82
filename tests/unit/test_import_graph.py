"""The repository's import graph: no cycles, layers that point down, no test
importing a test.

A cycle between modules works only in the order Python happens to load them
and makes neither module readable alone, so the graph of `estimator_scale/`
and `tools/` must have none. Each module is parsed, not imported (no
TensorFlow, no Horovod needed): every `import` statement counts, at the top
of a module or inside a function, with relative imports resolved and
`from package import module` taken as an import of that module.
"""
import ast
import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.realpath(__file__))))
"""The checkout (real path: under Bazel this file is a symlink into it)."""

GRAPH_ROOTS = ("estimator_scale", "tools")
SKIPPED_DIRS = ("__pycache__",)
LAYERS = (
    ("base", ("estimator_scale.errors", "estimator_scale.choices",
              "estimator_scale.gradients", "estimator_scale.precision",
              "estimator_scale.topology", "estimator_scale.backends.names",
              "estimator_scale.data_options", "estimator_scale.input_wait",
              "estimator_scale.stragglers", "estimator_scale.moments",
              "estimator_scale.memory_limit", "estimator_scale.resume",
              "estimator_scale.graph_state", "estimator_scale.environment")),
    ("tables", ("estimator_scale.embeddings",)),
    ("updates", ("estimator_scale.train_ops", "estimator_scale.hooks")),
    ("backends", ("estimator_scale.backends",)),
    ("library", ("estimator_scale",)),
    ("programs", ("estimator_scale.cli", "estimator_scale.launcher",
                  "estimator_scale.parquet")),
)
"""The package's layers, bottom first, each by the modules or packages it
holds (the longest match names a module's layer): a module imports its own
layer and those below. Backends name their tables' code and the update,
never the reverse; the base holds what every layer reads."""


def module_files(top):
  """{module name: file} of every .py under `top` (a directory of REPO)."""
  modules = {}
  for dirpath, dirnames, filenames in os.walk(os.path.join(REPO, top)):
    dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
    package = os.path.relpath(dirpath, REPO).replace(os.sep, ".")
    for filename in filenames:
      if filename.endswith(".py"):
        stem = filename[:-3]
        name = package if stem == "__init__" else f"{package}.{stem}"
        modules[name] = os.path.join(dirpath, filename)
  return modules


def _imported_names(path, module):
  """Every module name an import statement in `path` may refer to: for
  `from x import y`, both x.y (y a module) and x (y a name in it)."""
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read(), path)
  is_package = os.path.basename(path) == "__init__.py"
  package = module if is_package else module.rpartition(".")[0]
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        yield alias.name, None
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        parts = package.split(".")
        parent = ".".join(parts[:len(parts) - node.level + 1])
        base = f"{parent}.{base}" if base else parent
      for alias in node.names:
        yield base, alias.name


def imports(path, module, known):
  """The modules of `known` that the module `module` in `path` imports."""
  found = set()
  for base, name in _imported_names(path, module):
    if name and f"{base}.{name}" in known:
      found.add(f"{base}.{name}")
      continue
    while base and base not in known:  # `import a.b.c`: the deepest known
      base = base.rpartition(".")[0]
    if base:
      found.add(base)
  found.discard(module)
  return found


def find_cycle(graph):
  """One cycle of `graph` ({node: set of nodes}) as [a, b, ..., a], or None."""
  done, path, on_path = set(), [], {}

  def visit(node):
    on_path[node] = len(path)
    path.append(node)
    for child in sorted(graph.get(node, ())):
      if child in on_path:
        return path[on_path[child]:] + [child]
      if child not in done:
        cycle = visit(child)
        if cycle:
          return cycle
    path.pop()
    del on_path[node]
    done.add(node)
    return None

  for node in sorted(graph):
    if node not in done:
      cycle = visit(node)
      if cycle:
        return cycle
  return None


def test_find_cycle_reports_the_cycle():
  graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
  assert find_cycle(graph) == ["a", "b", "c", "a"]
  assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_imports_resolve_relative_and_from_package_imports(tmp_path):
  source = tmp_path / "m.py"
  source.write_text("from . import sibling\nfrom .. import top\n"
                    "from pkg.sub import helper, CONSTANT\n"
                    "def f():\n  import pkg.sub.deep.missing\n")
  known = {"pkg.sub.m", "pkg.sub.sibling", "pkg.top", "pkg.sub",
           "pkg.sub.helper", "pkg.sub.deep"}
  assert imports(str(source), "pkg.sub.m", known) == {
      "pkg.sub.sibling", "pkg.top", "pkg.sub.helper", "pkg.sub",
      "pkg.sub.deep"}


@pytest.mark.parametrize("top", GRAPH_ROOTS)
def test_no_import_cycle(top):
  modules = {}
  for root in GRAPH_ROOTS:
    modules.update(module_files(root))
  graph = {name: imports(path, name, modules)
           for name, path in modules.items() if name.split(".")[0] == top}
  cycle = find_cycle(graph)
  assert cycle is None, "import cycle: " + " -> ".join(cycle)


def layer(module):
  """The index in LAYERS of `module`'s layer."""
  found = [(len(prefix), index) for index, (_, prefixes) in enumerate(LAYERS)
           for prefix in prefixes
           if module == prefix or module.startswith(prefix + ".")]
  return max(found)[1]


def test_layer_takes_the_longest_match():
  assert LAYERS[layer("estimator_scale.backends.names")][0] == "base"
  assert LAYERS[layer("estimator_scale.backends.horovod.ranks")][0] == (
      "backends")
  assert LAYERS[layer("estimator_scale.estimator")][0] == "library"


def test_the_package_imports_only_down_its_layers():
  modules = module_files("estimator_scale")
  upward = [f"{name} ({LAYERS[layer(name)][0]}) imports {target} "
            f"({LAYERS[layer(target)][0]})"
            for name, path in sorted(modules.items())
            for target in sorted(imports(path, name, modules))
            if layer(target) > layer(name)]
  assert not upward, "; ".join(upward)


def test_no_test_module_imports_another():
  modules = module_files("tests")
  found = []
  for name, path in sorted(modules.items()):
    for target in sorted(imports(path, name, modules)):
      if target.rpartition(".")[2].startswith("test_"):
        found.append(f"{os.path.relpath(path, REPO)} imports {target}")
  assert not found, ("shared test code belongs in tests/helpers/: "
                     + "; ".join(found))


def test_no_sys_path_edits():
  # Spelled in two halves so that this file does not find itself.
  pattern = "sys.path" + ".insert"
  try:
    inside = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"],
                            cwd=REPO, capture_output=True, text=True,
                            check=False).returncode == 0
  except OSError:  # no git on this machine
    inside = False
  if not inside:
    pytest.skip(f"{REPO} is not a git checkout here: git grep cannot run")
  proc = subprocess.run(["git", "grep", "-n", "--untracked", pattern],
                        cwd=REPO, capture_output=True, text=True,
                        check=False)
  assert proc.returncode == 1, (
      f"{pattern} found (run modules with python -m from the repository "
      f"root instead):\n{proc.stdout}{proc.stderr}")

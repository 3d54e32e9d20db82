"""docs/layout.md names every module and package, and only what exists.

The page's ```text block is a tree: an entry is a line that starts with one
name or several joined by ", " (a folder ends in "/", a file has an
extension), followed by two spaces and what it holds, or by nothing; an
entry indented under a folder is inside it; any other line continues the
description above it.
"""
import os
import re

from tests.helpers import docs

LAYOUT = os.path.join(docs.DOCS, "layout.md")
PACKAGES = ("estimator_scale", "model_zoo", "tools")
"""The trees whose every module and package the page must name."""

_ENTRY = re.compile(r"^(?P<names>[\w.\-]+/?(?:, [\w.\-]+/?)*)(?:\s{2,}|$)")
_NAME = re.compile(r"^(?:[\w\-]+/|[\w.\-]*\w\.\w+)$")


def _entries(text):
  """[(line number, indent, names)] of the tree's entry lines."""
  entries = []
  for number, line in enumerate(text.splitlines(), 1):
    stripped = line.lstrip(" ")
    match = _ENTRY.match(stripped)
    names = match and match.group("names").split(", ")
    if names and all(_NAME.match(name) for name in names):
      entries.append((number, len(line) - len(stripped), names))
  return entries


def named_paths():
  """{path relative to the root: line of layout.md's tree that names it}."""
  trees = [text for language, text, _ in docs.fenced_blocks(LAYOUT)
           if language == "text"]
  assert len(trees) == 1, f"{LAYOUT}: want one ```text block, the tree"
  paths, parents = {}, []  # parents: [(indent, folder)]
  for number, indent, names in _entries(trees[0]):
    while parents and parents[-1][0] >= indent:
      parents.pop()
    folder = parents[-1][1] if parents else ""
    for name in names:
      paths[os.path.join(folder, name).rstrip("/")] = number
    if len(names) == 1 and names[0].endswith("/"):
      parents.append((indent, os.path.join(folder, names[0])))
  return paths


def modules_and_packages():
  """Every package (a folder with __init__.py) and module but __init__.py
  under PACKAGES, relative to the root."""
  found = set()
  for package in PACKAGES:
    for folder, subfolders, files in os.walk(os.path.join(docs.ROOT, package)):
      subfolders[:] = [s for s in subfolders if not s.startswith((".", "_"))]
      relative = os.path.relpath(folder, docs.ROOT)
      if "__init__.py" in files:
        found.add(relative)
      found.update(os.path.join(relative, name) for name in files
                   if name.endswith(".py") and name != "__init__.py")
  return found


def test_layout_names_every_module_and_package():
  missing = sorted(modules_and_packages() - set(named_paths()))
  assert not missing, f"docs/layout.md does not name {missing}"


def test_everything_layout_names_exists():
  absent = [f"line {line} of the tree: {path}"
            for path, line in sorted(named_paths().items())
            if not os.path.exists(os.path.join(docs.ROOT, path))]
  assert not absent, f"docs/layout.md names what does not exist: {absent}"


def test_the_tree_is_read_as_a_tree():
  """Nested entries land inside their folder (a misread indent would put
  them at the root, where they would not exist)."""
  paths = named_paths()
  assert "estimator_scale/backends/horovod/ranks.py" in paths
  assert "tools/bench/perf/peers" in paths

"""Every environment variable of ours is named once, in environment.py, and
has its row in docs/environment.md: a name spelled out elsewhere in the code
is one a reader of the table cannot find, and one missing from the table is
a setting only the source tells of."""
import ast
import os
import re

from estimator_scale import environment
from tests.helpers import docs

MODULE = os.path.join(docs.ROOT, "estimator_scale", "environment.py")
PAGE = os.path.join(docs.DOCS, "environment.md")
CODE_ROOTS = ("estimator_scale", "model_zoo")
"""The code that reads the variables (the zoo reads where its data lives)."""
ALLOWED_IMPORTS = {"estimator_scale.errors"}

_ROW = re.compile(r"^\|\s*`(" + environment.PREFIX + r"\w+)`\s*\|", re.M)


def variables():
  """{constant name: variable} of every variable environment.py names."""
  return {name: value for name, value in vars(environment).items()
          if name.isupper() and isinstance(value, str)
          and value.startswith(environment.PREFIX)
          and value != environment.PREFIX}


def test_each_variable_is_named_once():
  names = list(variables().values())
  assert names and len(names) == len(set(names)), names


def test_no_other_module_spells_a_variable_out():
  found = []
  for root in CODE_ROOTS:
    for folder, subfolders, files in os.walk(os.path.join(docs.ROOT, root)):
      subfolders[:] = [s for s in subfolders if s != "__pycache__"]
      for name in sorted(files):
        path = os.path.join(folder, name)
        if not name.endswith(".py") or path == MODULE:
          continue
        with open(path, encoding="utf-8") as f:
          for number, line in enumerate(f, 1):
            if environment.PREFIX in line:
              found.append(f"{os.path.relpath(path, docs.ROOT)}:{number}")
  assert not found, ("name the variable in estimator_scale/environment.py "
                     "and import it: " + ", ".join(found))


def test_every_variable_has_a_docstring():
  with open(MODULE, encoding="utf-8") as f:
    body = ast.parse(f.read()).body
  documented = {
      statement.targets[0].id for statement, after in zip(body, body[1:])
      if isinstance(statement, ast.Assign)
      and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
      and isinstance(after.value.value, str)}
  assert set(variables()) - documented == set()


def test_the_module_imports_only_the_errors():
  with open(MODULE, encoding="utf-8") as f:
    tree = ast.parse(f.read())
  imported = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      imported.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      imported.update(f"{node.module}.{alias.name}" for alias in node.names)
  ours = {name for name in imported if name.startswith("estimator_scale")}
  assert ours <= ALLOWED_IMPORTS, ours


def test_the_table_names_every_variable_and_only_those():
  with open(PAGE, encoding="utf-8") as f:
    rows = _ROW.findall(f.read())
  assert len(rows) == len(set(rows)), f"{PAGE}: a variable with two rows"
  named = set(variables().values())
  assert named - set(rows) == set(), f"{PAGE} has no row for these"
  assert set(rows) - named == set(), "environment.py does not name these"

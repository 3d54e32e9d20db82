"""What every tool shares: the checkout's root, results IO and templates.

Each benchmark keeps its raw results in its own `results/` folder and the
prose of its page in a Markdown template beside it; the page a user reads
is rendered into docs/ from those two, so a rerun changes JSON only.
"""
import json
import os
import string

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")


def load_json(path):
  """The JSON in `path`, or None where it does not exist (not measured yet)."""
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def write(path, text):
  """Writes `text` to `path` (none: nothing), making its folder."""
  if path:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
      f.write(text)


def fmt(value, digits=3):
  """A figure as the pages write it: thousands whole, smaller 3 digits."""
  if value is None:
    return "n/a"
  if abs(value) >= 100:
    return f"{value:,.0f}"
  return f"{value:.{digits}g}"


def fill_text(text, fields):
  """`text` with its `$name` placeholders from `fields`.

  string.Template, not str.format: the prose quotes braces, and a
  placeholder the renderer does not give is a KeyError that names it, not
  a page with a hole.
  """
  return string.Template(text).substitute(fields)


def fill_template(path, fields):
  """The template file in `path`, filled by fill_text."""
  with open(path, encoding="utf-8") as f:
    return fill_text(f.read(), fields)

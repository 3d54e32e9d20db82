"""The README and the guides say only what is true of this repository.

Every guide is linked from the README, every relative link resolves, every
page's ```python blocks run (in order, in one namespace, in a fresh working
directory; a block marked as a fragment is only compiled, and its marker
says why), and every command of a ```sh block names a Makefile target, a
module or file that exists, and only flags that the command line or the
launcher define, with values they accept. Commands that need a cluster
(horovodrun over hosts, the launcher over ssh) are checked the same way, not
run; tests/integration/test_docs_commands.py runs the quick start.
"""
import os
import re

from absl import flags as absl_flags
import pytest

from estimator_scale.cli import flags as cli_flags
from tests.helpers import commands
from tests.helpers import docs

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")

_PAGES = docs.markdown_files()


def _page_id(path):
  return os.path.relpath(path, docs.ROOT)


def _blocks(language):
  """[(page:line, text)] of every block in `language` on every page."""
  return [(f"{_page_id(path)}:{line}", text) for path in _PAGES
          for block_language, text, line in docs.fenced_blocks(path)
          if block_language == language]


def _anchor(heading):
  """The anchor GitHub gives a heading."""
  text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
  return text.replace(" ", "-")


def _anchors(path):
  """The anchors of the headings of `path` (outside its fenced blocks)."""
  anchors, inside = set(), False
  with open(path, encoding="utf-8") as f:
    for line in f:
      inside ^= line.startswith("```")
      if not inside and line.startswith("#"):
        anchors.add(_anchor(line.lstrip("#")))
  return anchors


def test_every_guide_is_linked_from_the_readme():
  readme = docs.prose(docs.README)
  linked = {os.path.normpath(target.partition("#")[0])
            for target in _LINK.findall(readme)}
  missing = [_page_id(path) for path in _PAGES[1:]
             if _page_id(path) not in linked]
  assert not missing, f"README.md links none of {missing}"


@pytest.mark.parametrize("page", _PAGES, ids=_page_id)
def test_relative_links_resolve(page):
  for target in _LINK.findall(docs.prose(page)):
    if re.match(r"^[a-z]+:", target):
      continue
    path, _, anchor = target.partition("#")
    resolved = os.path.normpath(os.path.join(os.path.dirname(page), path))
    assert os.path.exists(resolved), f"{_page_id(page)}: {target} is missing"
    if anchor and resolved.endswith(".md"):
      assert anchor in _anchors(resolved), (
          f"{_page_id(page)}: {target}: no heading makes #{anchor}")


def test_python_blocks_compile():
  blocks = _blocks("python")
  assert blocks
  for where, text in blocks:
    compile(text, where, "exec")


_RUNNABLE = [path for path in _PAGES
             if any(reason is None for _, _, reason in docs.python_blocks(path))]


@pytest.mark.parametrize("page", _RUNNABLE, ids=_page_id)
def test_python_blocks_run(page, tmp_path, monkeypatch):
  """The page's blocks but its fragments run as written, in a fresh
  directory: what they write (model_dir, data) goes under it."""
  monkeypatch.chdir(tmp_path)
  docs.run_python_blocks(page)


@pytest.mark.parametrize("page", _PAGES, ids=_page_id)
def test_fragment_markers_give_a_reason_and_mark_a_python_block(page):
  blocks = {line - 2: reason for _, line, reason in docs.python_blocks(page)}
  for line, reason in docs.fragment_markers(page).items():
    where = f"{_page_id(page)}:{line}"
    assert line in blocks, (
        f"{where}: a fragment marker must be the line just before a "
        "```python fence")
    assert reason, f"{where}: say why the block cannot run: <!-- fragment: why -->"


def test_shell_commands_name_what_exists():
  blocks = _blocks("sh")
  assert len(blocks) > 10
  for where, text in blocks:
    for words in docs.shell_commands(text):
      commands.check_command(words, where)


def test_getting_started_lists_every_cli_flag():
  """The flag table names each flag the command line defines, and no other."""
  defined = {flag.name for flag in
             absl_flags.FLAGS.flags_by_module_dict()[cli_flags.__name__]}
  with open(os.path.join(docs.DOCS, "getting-started.md"),
            encoding="utf-8") as f:
    table = f.read().partition("## Flags")[2].partition("\n## ")[0]
  named = set(re.findall(r"--(\w+)", table)) - {"verbosity", "help"}
  assert named == defined, (
      f"missing from the table: {sorted(defined - named)}; "
      f"not flags: {sorted(named - defined)}")

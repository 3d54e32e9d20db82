"""Reading the README and the guides: their fenced blocks and shell commands.

The docs mark a block's kind on its fence: ```sh blocks are commands meant to
run (checked by tests/unit/test_docs.py, and the quick start's run by
tests/integration/test_docs_commands.py), ```python blocks are code that
runs, ```text blocks are output or listings and are not checked.

A page's ```python blocks run in order in one namespace, as a reader pasting
them one after another would. A block that cannot run there (it needs
horovodrun, a cluster, data a command writes, or the names of a block it
sketches) says so on the line just before its fence:

    <!-- fragment: needs horovodrun's elastic driver -->

and is only compiled.
"""
import os
import re
import shlex

# The source tree, found through symlinks: under Bazel this file is a link in
# the runfiles, which hold no README or docs.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.realpath(__file__))))
README = os.path.join(ROOT, "README.md")
DOCS = os.path.join(ROOT, "docs")

_FENCE = re.compile(r"^```(\w*)\s*$")
_FRAGMENT = re.compile(r"^<!--\s*fragment:(.*)-->\s*$")
_HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")
_SEPARATORS = frozenset({";", "&&", "||", "|", "&"})
_REDIRECTS = frozenset({">", ">>", "<", "2>", "2>>"})


def markdown_files():
  """The README and every Markdown page directly under docs/."""
  pages = sorted(os.path.join(DOCS, name) for name in os.listdir(DOCS)
                 if name.endswith(".md"))
  return [README] + pages


def fenced_blocks(path):
  """[(language, text, first line number)] of the fenced blocks in `path`.

  Raises:
    AssertionError: a fence is left open, which would hide the rest of the
      page from every check.
  """
  blocks, language, lines, start = [], None, [], 0
  with open(path, encoding="utf-8") as f:
    for number, line in enumerate(f, 1):
      match = _FENCE.match(line.rstrip("\n"))
      if language is None and line.startswith("```"):
        language, lines, start = (match.group(1) if match else ""), [], number
      elif language is not None and match and not match.group(1):
        blocks.append((language, "".join(lines), start + 1))
        language = None
      elif language is not None:
        lines.append(line)
  assert language is None, f"{path}:{start}: the fence opened here never closes"
  return blocks


def fragment_markers(path):
  """{line number: the reason given} of every fragment marker in `path`,
  outside fenced blocks (a block may show one)."""
  markers, inside = {}, False
  with open(path, encoding="utf-8") as f:
    for number, line in enumerate(f, 1):
      if line.startswith("```"):
        inside = not inside
      match = not inside and _FRAGMENT.match(line.strip())
      if match:
        markers[number] = match.group(1).strip()
  return markers


def python_blocks(path):
  """[(text, first line number, fragment reason or None)] of the page's
  ```python blocks; a block is a fragment when the line just before its
  opening fence is a fragment marker."""
  markers = fragment_markers(path)
  # A block's text starts on `line`, so its fence is line - 1 and the marker
  # line - 2.
  return [(text, line, markers.get(line - 2))
          for language, text, line in fenced_blocks(path)
          if language == "python"]


def run_python_blocks(path):
  """Runs the page's ```python blocks but its fragments, in order, in one
  namespace; returns it.

  Each block is compiled as `path` at its own line numbers, so a traceback
  names the page and the line of the guide that failed.
  """
  namespace = {"__name__": "__main__"}
  for text, line, reason in python_blocks(path):
    if reason is None:
      exec(compile("\n" * (line - 1) + text, path, "exec"), namespace)  # pylint: disable=exec-used
  return namespace


def prose(path):
  """The text of `path` outside fenced blocks and inline code spans."""
  kept, inside = [], False
  with open(path, encoding="utf-8") as f:
    for line in f:
      if line.startswith("```"):
        inside = not inside
      elif not inside:
        kept.append(line)
  return re.sub(r"`[^`]*`", "", "".join(kept))


def shell_commands(text):
  """The simple commands of a shell block, each a list of words.

  Continued lines are joined, here-document bodies skipped, comments
  dropped; `;`, `&&`, `||`, `|` and `&` end a command, and redirections
  are removed with their target.
  """
  commands, heredoc_end, logical = [], None, []
  for line in text.replace("\\\n", " ").splitlines():
    if heredoc_end is not None:
      if line.strip() == heredoc_end:
        heredoc_end = None
      continue
    match = _HEREDOC.search(line)
    if match:
      heredoc_end = match.group(1)
      line = line[:match.start()]
    logical.append(line)
  for line in logical:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words, skip_next = [], False
    for word in lexer:
      if skip_next:
        skip_next = False
      elif word in _REDIRECTS:
        skip_next = True
      elif word in _SEPARATORS:
        commands.append(words)
        words = []
      else:
        words.append(word)
    commands.append(words)
  return [words for words in commands if words]

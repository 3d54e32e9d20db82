"""The quick start of docs/getting-started.md runs as written.

The guide's command-line quick start works in /tmp/quickstart; here each of
its commands runs in a subprocess, in order, with that directory replaced by
a fresh one and `.venv/bin/` by this interpreter's directory, so a guide that
stops working fails this test.
"""
import json
import os
import shlex
import sys

from tests.helpers import docs
from tests.helpers import processes

_GUIDE = os.path.join(docs.DOCS, "getting-started.md")
_WORK_DIR = "/tmp/quickstart"


def _quick_start():
  """The guide's shell block that works in _WORK_DIR."""
  blocks = [text for language, text, _ in docs.fenced_blocks(_GUIDE)
            if language == "sh" and _WORK_DIR in text]
  assert len(blocks) == 1, f"{_GUIDE}: want one sh block using {_WORK_DIR}"
  return blocks[0]


def test_quick_start_runs(tmp_path):
  text = _quick_start().replace(_WORK_DIR, str(tmp_path))
  bin_dir = os.path.dirname(sys.executable)
  commands = docs.shell_commands(text.replace(".venv/bin", bin_dir))
  for words in commands:
    proc = processes.run(words, timeout=300)
    assert "Traceback" not in proc.stderr, shlex.join(words)
  summary = json.loads((tmp_path / "summary.json").read_text())
  assert summary["global_step"] == 50
  assert summary["model"] == "digits_mlp"
  assert os.listdir(tmp_path / "export")


def test_cli_help_lists_the_guides_flags():
  # absl's --help prints the usage and exits 1, so the exit code says nothing.
  proc = processes.run([sys.executable, "-m", "estimator_scale.cli", "--help"],
                       check=False)
  for flag in ("--model", "--model_dir", "--train_steps", "--summary_json",
               "--export_dir"):
    assert flag in proc.stdout, proc.stderr[-2000:]

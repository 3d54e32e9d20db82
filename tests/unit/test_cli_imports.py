"""`estimator-scale --help` loads no TensorFlow: the flags and their choices
come from modules that do not import it, and a command's modules load only
when it runs."""
import re

import pytest

from tests.helpers.processes import PYTHON, run

_HEAVY = re.compile(r"^(tensorflow|keras|tf_keras|horovod\.tensorflow)(\.|$)")
"""Modules that only a running command may load."""

_CONSOLE_SCRIPT = ("import sys; from estimator_scale.cli.__main__ import run; "
                   "sys.argv[0] = 'estimator-scale'; run()")
"""What setup.py's `estimator-scale` wrapper does."""


def _imported(importtime_output):
  """The modules `python -X importtime` reports, in import order."""
  names = []
  for line in importtime_output.splitlines():
    if line.startswith("import time:") and "[us]" not in line:  # no header
      names.append(line.rsplit("|", 1)[1].strip())
  return names


@pytest.mark.parametrize("program", [["-m", "estimator_scale.cli"],
                                     ["-c", _CONSOLE_SCRIPT]],
                         ids=["module", "console_script"])
def test_help_imports_no_tensorflow(program):
  proc = run([PYTHON, "-X", "importtime", *program, "--help"],
             check=False)  # absl's --help exits 1
  assert "estimator-scale [COMMAND]" in proc.stdout, proc.stdout
  assert ("--optimizer: <sgd|momentum|adam|lazy_adam|adamw|lars|lamb|adagrad|"
          "ftrl>" in proc.stdout)
  assert "--train_data" in proc.stdout  # every group's flags, one module
  imported = _imported(proc.stderr)
  assert "estimator_scale.cli.flags" in imported  # the report was read
  heavy = [name for name in imported if _HEAVY.match(name)]
  assert not heavy, heavy

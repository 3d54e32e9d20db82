"""Checking a shell command of the docs or manifests, without running it.

A command must name a Makefile target, a module or file that exists, and only
flags that the CLI or the launcher define, with values they accept
(through the CLI's own absl flags and the launcher's own argument parser);
runners (horovodrun, srun, ...) are looked through to the command they start.
tests/unit/test_docs.py checks the guides' ```sh blocks with it, and
tests/unit/test_deploy.py the Kubernetes manifests' container commands.
"""
import ast
import contextlib
import importlib.util
import io
import os
import re

from absl import flags as absl_flags

# Importing it defines the CLI's flags in absl's FLAGS.
import estimator_scale.cli.flags  # pylint: disable=unused-import
from estimator_scale.launcher import __main__ as launcher_main
from tests.helpers import docs

_REPO_PATH = re.compile(
    r"^(estimator_scale|model_zoo|tools|tests|third_party|docs)/[^*?$]*$")
_PYTHONS = ("python", "python3")
_RUNNERS = ("horovodrun", "mpirun", "srun", "sudo", "env")
_CLI_COMMANDS = ("train", "evaluate", "export", "models")


def _makefile_targets():
  with open(os.path.join(docs.ROOT, "Makefile"), encoding="utf-8") as f:
    return set(re.findall(r"^([\w-]+):", f.read(), re.MULTILINE))


def _zoo_models():
  """Names of the models model_zoo registers, read without importing it."""
  names = set()
  zoo = os.path.join(docs.ROOT, "model_zoo")
  for filename in os.listdir(zoo):
    if filename.endswith(".py"):
      with open(os.path.join(zoo, filename), encoding="utf-8") as f:
        tree = ast.parse(f.read())
      for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.decorator_list:
          for statement in node.body:
            if (isinstance(statement, ast.Assign) and
                [getattr(t, "id", None) for t in statement.targets] == ["name"]
                and isinstance(statement.value, ast.Constant)):
              names.add(statement.value.value)
  return names


def _module_file(module):
  """The file `python -m module` runs, or None when this repo has none."""
  base = os.path.join(docs.ROOT, *module.split("."))
  for candidate in (base + ".py", os.path.join(base, "__main__.py")):
    if os.path.isfile(candidate):
      return candidate
  return None


def _check_cli(args, where):
  """Fails unless every flag in `args` is one of the command line's, with a
  value its parser takes, and the positional words are commands."""
  words = list(args)
  while words:
    word = words.pop(0)
    if not word.startswith("--"):
      assert word in _CLI_COMMANDS, (
          f"{where}: `{word}` is no command of the CLI ({_CLI_COMMANDS})")
      continue
    name, has_value, value = word[2:].partition("=")
    if name not in absl_flags.FLAGS and name[2:] in absl_flags.FLAGS:
      name, has_value, value = name[2:], True, "false"        # --noFLAG
    assert name in absl_flags.FLAGS, f"{where}: the CLI has no flag {word}"
    flag = absl_flags.FLAGS[name]
    if not has_value and flag.boolean:
      value = "true"
    elif not has_value:
      value = words.pop(0)
    try:
      flag.parser.parse(value)
    except (ValueError, TypeError) as e:
      raise AssertionError(f"{where}: --{name}={value} is refused: {e}") from e
    if name == "model":
      assert value in _zoo_models(), (
          f"{where}: --model={value} is not registered in model_zoo "
          f"({sorted(_zoo_models())})")


def _check_launcher(args, where):
  """Fails unless the launcher's parser takes its flags; then checks the
  command it starts."""
  split = args.index("--") if "--" in args else len(args)
  usage = io.StringIO()
  try:
    with contextlib.redirect_stderr(usage):
      launcher_main._parser().parse_args(args[:split])
  except SystemExit as e:
    raise AssertionError(f"{where}: the launcher refuses {args[:split]}: "
                         f"{usage.getvalue().splitlines()[-1]}") from e
  assert not usage.getvalue(), f"{where}: {usage.getvalue().strip()}"
  if split < len(args):
    check_command(args[split + 1:], where)


def _check_python(args, where):
  if args[0] != "-m":
    script = args[0]
    assert os.path.isfile(os.path.join(docs.ROOT, script)), (
        f"{where}: no file {script}")
    return
  module, rest = args[1], args[2:]
  if module == "estimator_scale.cli":
    _check_cli(rest, where)
  elif module == "estimator_scale.launcher":
    _check_launcher(rest, where)
  elif module.split(".")[0] in ("estimator_scale", "model_zoo", "tools",
                                "tests"):
    assert _module_file(module), (
        f"{where}: `python -m {module}` names no module of this repository")
    if "--" in rest:                 # a tool that runs a command (the rig)
      check_command(rest[rest.index("--") + 1:], where)
  else:
    assert importlib.util.find_spec(module), f"{where}: no module {module}"


def check_command(words, where):
  """Fails (AssertionError naming `where`) unless the simple command `words`
  names what exists, with flags and values its parser takes."""
  for word in words:
    value = word.partition("=")[2] if word.startswith("--") else word
    if _REPO_PATH.match(value):
      assert os.path.exists(os.path.join(docs.ROOT, value)), (
          f"{where}: `{value}` does not exist")
  while words and re.match(r"^\w+=", words[0]):
    words = words[1:]
  if not words:
    return
  program = os.path.basename(words[0])
  if program == "make":
    targets = _makefile_targets()
    for target in words[1:]:
      assert target in targets, f"{where}: the Makefile has no target {target}"
  elif program in _PYTHONS:
    _check_python(words[1:], where)
  elif program == "estimator-scale":
    _check_cli(words[1:], where)
  elif program == "estimator-scale-launch":
    _check_launcher(words[1:], where)
  elif program in _RUNNERS:
    inner = [i for i, word in enumerate(words) if i and
             os.path.basename(word) in _PYTHONS + ("estimator-scale",
                                                   "estimator-scale-launch")]
    if inner:
      check_command(words[inner[0]:], where)

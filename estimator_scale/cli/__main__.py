"""The command line: estimator-scale [COMMAND] [--FLAG=VALUE ...].

Also `python -m estimator_scale.cli`. `train` (the default) trains a
registered model (or one from --model_module) with evaluations, optionally
exports the best and final SavedModel, and writes a JSON summary.
`evaluate` and `export` use the latest (or --checkpoint) checkpoint in
--model_dir; `models` lists the registered models.

Exit codes: 0 done; 2 a flag or configuration the framework rejects (one
line on stderr); 1 an exception from the model's code or TensorFlow at run
time (its traceback, naming the model method that was running).
"""
import importlib
import re
import sys

from absl import app
from absl import flags as absl_flags

from estimator_scale import errors
from estimator_scale import filesystems
from estimator_scale.cli import flags
from estimator_scale.cli import logs

FLAGS = flags.FLAGS

# `--help` lists every flag of the command, not only this module's.
absl_flags.adopt_module_key_flags(flags)

_COMMANDS = {
    "train": ("estimator_scale.cli.train", "run_training"),
    "evaluate": ("estimator_scale.cli.checkpoints", "run_evaluation"),
    "export": ("estimator_scale.cli.checkpoints", "run_export"),
    "models": ("estimator_scale.cli.estimators", "list_models"),
}
"""Each command's (module, function)."""


def _command(name):
  """The function of command `name`, imported only now: commands load
  TensorFlow, which `--help` or a bad flag must not."""
  module, function = _COMMANDS[name]
  return getattr(importlib.import_module(module), function)


def _as_flags(message):
  """The library's message with flag names dashed (`--global_batch_size=3`):
  a name followed by `=` or `:`, outside paths, quotes and dashed flags."""
  names = sorted((name for name in FLAGS if len(name) > 3), key=len,
                 reverse=True)
  pattern = rf"(?<![\w./'\"-])({'|'.join(map(re.escape, names))})(?=[=:])"
  return re.sub(pattern, r"--\1", str(message))


def _fail(message):
  """One line on stderr and exit 2: what a usage or configuration error gets."""
  print(f"{errors.COMMAND_LINE_PREFIX}{_as_flags(message)}", file=sys.stderr)
  sys.exit(2)


def _parse_flags(argv):
  """absl's parser, but a bad flag is one line and exit 2, like the rest."""
  try:
    return FLAGS(argv)
  except absl_flags.Error as e:
    _fail(e)


def _require_file_systems():
  """Loads every path flag's file system up front, not minutes into a job."""
  for name in flags.PATH_FLAGS:
    filesystems.require(name, FLAGS[name].value)


def main(argv):
  command = argv[1:] or ["train"]
  if len(command) != 1 or command[0] not in _COMMANDS:
    _fail(f"unknown command {' '.join(command)!r}; valid: "
          f"{', '.join(_COMMANDS)}")
  try:
    logs.configure()
    _require_file_systems()
    _command(command[0])()
  except (errors.Error, app.UsageError) as e:
    _fail(e)
  # Anything else (the model's code, TensorFlow at run time) propagates:
  # Python prints its traceback and exits 1.


def _usage_from_here():
  """Makes `--help` print this module's docstring and flags when the console
  script's wrapper is __main__ (absl takes both from the main module)."""
  main_module = sys.modules["__main__"]
  if main_module is sys.modules[__name__]:
    return
  main_module.__doc__ = __doc__
  for flag in FLAGS.get_key_flags_for_module(__name__):
    FLAGS.register_key_flag_for_module(sys.argv[0], flag)


def run():
  """Console-script entry point; with tensorflow-io loaded it ends through
  `filesystems.exit_process` (a normal exit aborts in tensorflow-io)."""
  _usage_from_here()
  try:
    app.run(main, flags_parser=_parse_flags)
  except SystemExit as e:
    if not filesystems.io_loaded():
      raise
    filesystems.exit_process(filesystems.exit_status(e.code))
  except BaseException:  # pylint: disable=broad-except
    if not filesystems.io_loaded():
      raise
    sys.excepthook(*sys.exc_info())
    filesystems.exit_process(1)


if __name__ == "__main__":
  run()

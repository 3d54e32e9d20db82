"""The framework's own errors: one small hierarchy.

Everything here means "the job as configured cannot run", found before or
while it is set up, and the message says how to fix it; the CLI prints such
an error as one line and exits 2. Anything else (an exception from a user's
model code, or from TensorFlow at run time) is not one of these, so it keeps
its traceback. They subclass ValueError because that is what Python code
catches for a bad argument, and what this package raised before.

Library messages name the argument (`global_batch_size=3`); only the CLI
speaks in `--flags`.
"""
from absl import logging


COMMAND_LINE_PREFIX = "estimator-scale: error: "
"""What starts the one line the command line prints for an Error, and a
rank that must end without raising one prints the same way."""


class Error(ValueError):
  """Base of the framework's errors."""


class ConfigError(Error):
  """An argument or configuration value the framework cannot run."""


class UsageError(Error, TypeError):
  """The API used in a way it does not support: an argument of the wrong
  type, arguments that exclude or need each other, a call in the wrong
  order, a method this kind of Estimator lacks."""


class TopologyError(Error):
  """The environment does not describe a job this backend can run."""


class DataError(Error):
  """Input files that cannot be read as declared; names the file."""


def note_model_method(error, method):
  """Adds "raised in <method>" to an exception from a user's model method.

  Only the innermost method is named (the one that raised), and framework
  errors are left alone: their message already says what to fix.
  """
  if isinstance(error, Error) or getattr(error, "_model_method", None):
    return
  error._model_method = method  # pylint: disable=protected-access
  note = (f"raised in the model's {method}(); the traceback above shows "
          "the line")
  if hasattr(error, "add_note"):  # Python 3.11+: printed with the traceback
    error.add_note(note)
  else:
    logging.error("%s: %s", type(error).__name__, note)

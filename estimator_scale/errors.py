"""The framework's own errors: "the job as configured cannot run".

The CLI prints one as one line and exits 2. Library messages name the
argument (`global_batch_size=3`); only the CLI speaks in `--flags`.
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
  """The API used in a way it does not support (type, conflict, call order)."""


class TopologyError(Error):
  """The environment does not describe a job this backend can run."""


class DataError(Error):
  """Input files that cannot be read as declared; names the file."""


def note_model_method(error, method):
  """Adds "raised in <method>" to a user model method's exception: innermost
  only, never to framework errors."""
  if isinstance(error, Error) or getattr(error, "_model_method", None):
    return
  error._model_method = method  # pylint: disable=protected-access
  note = (f"raised in the model's {method}(); the traceback above shows "
          "the line")
  if hasattr(error, "add_note"):  # Python 3.11+: printed with the traceback
    error.add_note(note)
  else:
    logging.error("%s: %s", type(error).__name__, note)

"""What the command line prints: each message once, from the chief.

Only absl's handler is kept (TF's logger feeds it too); TF INFO shows from
`--verbosity=1`; non-chief workers log warnings and errors only; warnings
TF gives working jobs are dropped by exact text (`EXPECTED`).
"""
import logging as std_logging
import re
import warnings

from absl import logging

from estimator_scale import errors
from estimator_scale import stack

EXPECTED = (
    # Estimator's multi-worker training asks for an evaluation strategy; the
    # framework evaluates on the chief alone, without one, by design.
    ("distribute_coordinator.py",
     "`eval_strategy` is not passed in. No distribution strategy will be used "
     "for evaluation."),
    # Estimator's step counter reads global_step in each run unordered
    # against that run's update. Where the variable lives on a parameter
    # server the read may land after one run's update and before the next
    # one's, so two runs that each advanced the step read the same value.
    ("basic_session_run_hooks.py",
     "It seems that global step (tf.train.get_global_step) has not been "
     "increased."),
)
"""(file, how the message starts) of TensorFlow's log records that state
the framework's own choice or misread what happened, not a problem."""

OPTIONS_IN_GRAPH_MODE = ("To make it possible to preserve tf.data options "
                         "across serialization boundaries")
"""How the UserWarning starts that tf.distribute's input path triggers itself
(its MultiDeviceIterator reads `dataset.options()` in graph mode) on every
multi_worker_mirrored worker: no option of the user's or the framework's
is involved, so nothing can be done about it but not to print it."""

_asked_verbosity = None  # absl's verbosity before configure first lowered it


class _NoExpected(std_logging.Filter):
  """Drops the records of `EXPECTED`, and only those."""

  def filter(self, record):
    return not any(record.pathname.endswith(path) and
                   record.getMessage().startswith(message)
                   for path, message in EXPECTED)


def _add_once(logger, kind):
  if not any(isinstance(f, kind) for f in logger.filters):
    logger.addFilter(kind())


def configure(is_chief=True):
  """Sets up logging for the command line (never called by the library).

  Args:
    is_chief: whether this process is the chief (called again when it
      becomes one: an elastic job's new rank 0).

  Raises:
    ConfigError: TensorFlow is missing or not a 2.15 release.
  """
  global _asked_verbosity
  try:
    stack.require_tensorflow()
  except ImportError as e:
    raise errors.ConfigError(str(e)) from None
  # The library's pin notice is not printed: the command's log carries no
  # deprecation notices, and N ranks would print it N times.
  stack.say_notice(say=False)
  stack.quiet()
  tf_logger = std_logging.getLogger("tensorflow")
  for handler in list(tf_logger.handlers):
    tf_logger.removeHandler(handler)
  tf_logger.propagate = True
  _add_once(tf_logger, _NoExpected)
  warnings.filterwarnings("ignore", category=DeprecationWarning)
  warnings.filterwarnings("ignore", message=r".*is deprecated",
                          category=UserWarning)
  warnings.filterwarnings("ignore", message=re.escape(OPTIONS_IN_GRAPH_MODE),
                          category=UserWarning)
  if _asked_verbosity is None:
    _asked_verbosity = logging.get_verbosity()
  if is_chief:
    logging.set_verbosity(_asked_verbosity)
  else:  # absl's levels grow with verbosity: WARNING < INFO
    logging.set_verbosity(min(_asked_verbosity, logging.WARNING))
  verbose = logging.get_verbosity() >= logging.DEBUG
  tf_logger.setLevel(std_logging.INFO if verbose else std_logging.WARNING)

"""What the command line prints: each message once, from the chief.

Only absl's handler is kept (TF's logger feeds it too); TF INFO shows from
`--verbosity=1`; non-chief workers log warnings and errors only; warnings
TF gives working jobs are dropped as the library drops them (stack.py).
"""
import logging as std_logging
import re
import warnings

from absl import logging

from estimator_scale import errors
from estimator_scale import stack

OPTIONS_IN_GRAPH_MODE = ("To make it possible to preserve tf.data options "
                         "across serialization boundaries")
"""How the UserWarning starts that tf.distribute's input path triggers itself
(its MultiDeviceIterator reads `dataset.options()` in graph mode) on every
multi_worker_mirrored worker: no option of the user's or the framework's
is involved, so nothing can be done about it but not to print it."""

_asked_verbosity = None  # absl's verbosity before configure first lowered it


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

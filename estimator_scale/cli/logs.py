"""What the command line prints: each message once, from the chief.

TensorFlow's logger has a handler of its own and also passes its records to
absl's root handler, so every TensorFlow line appears twice; its INFO lines
(graphs finalized, model_fn called) repeat for every graph Estimator builds;
and each deprecated API it uses warns once per call site and process. The
command keeps absl's handler alone, TensorFlow's INFO lines for
`--verbosity=1` and above, deprecation notices off, and on every worker but
the chief only warnings and errors: N ranks printing the same progress make
a log nobody reads.
"""
import logging as std_logging
import warnings

from absl import logging


class _NoDeprecations(std_logging.Filter):
  """Drops TensorFlow's "X is deprecated ... Instructions for updating" lines."""

  def filter(self, record):
    return not record.pathname.endswith("deprecation.py")


def configure(is_chief=True):
  """Sets up logging for the command line (never called by the library).

  Args:
    is_chief: whether this process is the chief; others log warnings and
      errors only, whatever --verbosity says.
  """
  tf_logger = std_logging.getLogger("tensorflow")
  for handler in list(tf_logger.handlers):
    tf_logger.removeHandler(handler)
  tf_logger.propagate = True
  if not any(isinstance(f, _NoDeprecations) for f in tf_logger.filters):
    tf_logger.addFilter(_NoDeprecations())
  warnings.filterwarnings("ignore", category=DeprecationWarning)
  warnings.filterwarnings("ignore", message=r".*is deprecated",
                          category=UserWarning)
  if not is_chief:  # absl's levels grow with verbosity: WARNING < INFO
    logging.set_verbosity(min(logging.get_verbosity(), logging.WARNING))
  verbose = logging.get_verbosity() >= logging.DEBUG
  tf_logger.setLevel(std_logging.INFO if verbose else std_logging.WARNING)

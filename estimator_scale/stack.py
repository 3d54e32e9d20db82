"""The TensorFlow the framework pins (2.15: tf.estimator is gone from 2.16).

`QuietFilter` drops notices of tf.estimator and of machinery the framework
drives (`DRIVEN`), and the records of `EXPECTED`; the user's own deprecated
calls, and every other warning, still show.
"""
import importlib.util
import logging as std_logging
import os
import sys
import threading

PIN = "2.15"
"""The TensorFlow release line the framework runs on."""

GUIDE = "docs/getting-started.md#the-stack"

NOTICE = ("estimator_scale: tf.estimator is deprecated upstream and gone from "
          f"TensorFlow 2.16, so estimator_scale pins TensorFlow {PIN}, its "
          "last release; TensorFlow's deprecation notices for the Estimator "
          f"machinery the framework drives are not repeated ({GUIDE})")
"""What the library says once per process about the pin."""

INSTALL = ("pip install tensorflow-cpu==2.15.1 (or tensorflow==2.15.1 on a "
           "GPU host)")

ESTIMATOR_INSTRUCTIONS = "Use tf.keras instead."
"""The instructions tensorflow_estimator's `estimator_export` gives every
tf.estimator symbol it deprecates, and no other TensorFlow symbol has."""

DRIVEN = ("estimator_scale", "tensorflow_estimator", "tensorflow", "keras",
          "horovod")
"""Top-level packages whose own calls of deprecated APIs stay quiet."""

EXPECTED = (
    # Estimator's multi-worker training asks for an evaluation strategy; the
    # framework evaluates on the chief alone, without one, by design.
    ("distribute_coordinator.py",
     "`eval_strategy` is not passed in. No distribution strategy will be used "
     "for evaluation."),
    # Estimator's step counter reads global_step in each run unordered
    # against that run's update: the read may land after one run's update
    # and before the next one's (a step on a parameter server, or an update
    # that takes long, as a dynamic table's), so two runs that each advanced
    # the step read the same value.
    ("basic_session_run_hooks.py",
     "It seems that global step (tf.train.get_global_step) has not been "
     "increased."),
)
"""(file, how the message starts) of TensorFlow's log records that state
the framework's own choice or misread what happened, not a problem."""

_lock = threading.Lock()
_filter = None  # the process's QuietFilter, once made
_said = False  # whether NOTICE was logged (or is not to be) in this process


def _package_dirs(names):
  """Source folders (ending in os.sep) of installed `names`, not imported."""
  dirs = []
  for name in names:
    try:
      spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
      continue
    for location in (spec and spec.submodule_search_locations) or ():
      for path in {os.path.abspath(location), os.path.realpath(location)}:
        dirs.append(path.rstrip(os.sep) + os.sep)
  return tuple(dirs)


def _is_notice(record):
  """Whether a log record is one of TensorFlow's deprecation notices
  ("From FILE:LINE: ... is deprecated ...")."""
  return (record.pathname.endswith("deprecation.py") and
          isinstance(record.msg, str) and record.msg.startswith("From %s:")
          and bool(record.args))


def _call_site(record):
  """(file, line) of the deprecated call being logged: the first frame outside
  tensorflow/python/util (TF's own may say dispatch.py)."""
  wrappers = os.path.dirname(record.pathname) + os.sep
  frame, inside = sys._getframe(), False  # pylint: disable=protected-access
  while frame is not None:
    in_wrappers = frame.f_code.co_filename.startswith(wrappers)
    if inside and not in_wrappers:
      return os.path.abspath(frame.f_code.co_filename), frame.f_lineno
    inside = inside or in_wrappers
    frame = frame.f_back
  path, _, line = str(record.args[0]).rpartition(":")
  return os.path.abspath(path), line


def _expected(record):
  return any(record.pathname.endswith(path) and
             record.getMessage().startswith(message)
             for path, message in EXPECTED)


def _estimator_symbol(record):
  """Whether the record is the deprecation notice of a tf.estimator symbol."""
  return ("Instructions for updating" in record.msg and
          str(record.args[-1]).strip() == ESTIMATOR_INSTRUCTIONS)


class QuietFilter(std_logging.Filter):
  """Drops the notices the module docstring names, taking back TF's "warned"
  mark so the user's own later call still warns."""

  def __init__(self):
    super().__init__()
    self._driven = None
    self._marked = set()

  def _is_driven(self, path):
    if self._driven is None:
      self._driven = _package_dirs(DRIVEN)
    return path.startswith(self._driven)

  def filter(self, record):
    if _expected(record):
      return False
    if not _is_notice(record):
      return True
    if _estimator_symbol(record):
      return False
    path, line = _call_site(record)
    deprecation = sys.modules.get("tensorflow.python.util.deprecation")
    printed = getattr(deprecation, "_PRINTED_WARNING", None)
    if not self._is_driven(path):
      if printed is not None:
        self._marked = set(printed)
      # The notice names the user's line, not TensorFlow's dispatcher.
      record.args = (f"{path}:{line}",) + tuple(record.args[1:])
      return True
    if printed is not None:
      # The marks made for this notice: those not there at the last one.
      for key in [k for k in printed if k not in self._marked]:
        printed.pop(key, None)
      self._marked = set(printed)
    return False


def quiet():
  """Puts `QuietFilter` on TF's (Python) logger, without loading TF."""
  global _filter
  logger = std_logging.getLogger("tensorflow")
  with _lock:
    if _filter is None:
      _filter = QuietFilter()
    if _filter not in logger.filters:
      logger.addFilter(_filter)


def say_notice(say=True):
  """Logs `NOTICE` once per process; `say=False` only marks it said."""
  global _said
  with _lock:
    if _said:
      return
    _said = True
  if say:
    # Python's logger, not absl's module functions: those give the root
    # logger a handler when none is set up, and TensorFlow's records, which
    # also reach the root, would then print twice.
    std_logging.getLogger(__name__).warning(NOTICE)


def require_tensorflow():
  """Imports TensorFlow and checks that it is a 2.15 release.

  Returns:
    The tensorflow module.

  Raises:
    ImportError: missing or another release; says what to install.
  """
  try:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise ImportError(
        f"estimator_scale needs TensorFlow {PIN} (the last release with "
        f"tf.estimator) and found none: {INSTALL}; see {GUIDE}") from None
  version = getattr(tf, "__version__", "unknown")
  if not version.startswith(PIN + "."):
    raise ImportError(
        f"estimator_scale needs TensorFlow {PIN} (the last release with "
        f"tf.estimator) and found TensorFlow {version}: {INSTALL}; see "
        f"{GUIDE}")
  return tf


def loaded(error=None):
  """After importing a public name's module: check TF and log `NOTICE`; after
  a failed import due to TF, raise `require_tensorflow`'s error."""
  if error is not None:
    require_tensorflow()
    return
  if sys.modules.get("tensorflow") is not None:  # loaded by that import
    require_tensorflow()
    say_notice()

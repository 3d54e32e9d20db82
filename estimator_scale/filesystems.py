"""The file system a path needs; tensorflow-io (costly) only for its schemes."""
import atexit
import ctypes
import os
import re
import sys

from estimator_scale import errors

IO_INSTALL = "pip install tensorflow-io==0.36.0"
"""What brings the schemes TensorFlow lacks: the release built for TF 2.15,
which estimator_scale's `s3` extra names too."""
IO_SCHEMES = ("s3", "hdfs", "viewfs", "har", "az", "oss", "http", "https")
"""Schemes tensorflow-io registers; none of them is built into TF 2.15."""

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def scheme(path):
  """The scheme of `path` ("s3" of s3://bucket/run), "" for a local path."""
  match = _SCHEME.match(os.fspath(path))
  return match.group(1).lower() if match else ""


def _registered():
  # Lazy: the CLI imports this module before a --help, which loads no TF.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return set(tf.io.gfile.get_registered_schemes())


def require(name, path):
  """Makes sure tf.io.gfile can open `path` (tensorflow-io for its schemes).

  Args:
    name: what the path was given as (`model_dir`), for the message.
    path: a path or glob; without a scheme, nothing is done.

  Raises:
    ConfigError: no file system for the scheme; says what to install.
  """
  wanted = scheme(path) if path else ""
  if not wanted or wanted in _registered():
    return
  if wanted not in IO_SCHEMES:
    raise errors.ConfigError(
        f"{name}={path}: TensorFlow has no file system for {wanted}://; "
        f"built in: {', '.join(sorted(s for s in _registered() if s))}, "
        f"and with tensorflow-io: {', '.join(IO_SCHEMES)}")
  try:
    # Lazy: optional (the s3 extra), and loaded only for a scheme of its own.
    import tensorflow_io  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    raise errors.ConfigError(
        f"{name}={path} needs the {wanted} file system of tensorflow-io: "
        f"{IO_INSTALL}") from None
  if wanted not in _registered():
    raise errors.ConfigError(
        f"{name}={path}: tensorflow_io is installed but registered no "
        f"{wanted} file system; install the release built for this "
        f"TensorFlow: {IO_INSTALL}")


def io_loaded():
  """Whether this process imported tensorflow-io (by `require` or not)."""
  return "tensorflow_io" in sys.modules


def exit_process(status):
  """Ends the process with `status`, skipping C++ static destructors: at exit
  tensorflow-io 0.36.0's AWS SDK aborts a successful job."""
  try:
    atexit._run_exitfuncs()  # pylint: disable=protected-access
  finally:
    for stream in (sys.stdout, sys.stderr):
      try:
        stream.flush()
      except (AttributeError, OSError, ValueError):
        pass
    ctypes.CDLL(None).fflush(None)
    os._exit(status)  # pylint: disable=protected-access


def exit_status(code):
  """The status `sys.exit(code)` exits with (a message code printed first)."""
  if code is None:
    return 0
  if isinstance(code, int):
    return code & 0xFF
  print(code, file=sys.stderr)
  return 1

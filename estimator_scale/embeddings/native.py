"""The dynamic tables' kernel (kernels/dynamic_rows.cc), built against the
TensorFlow installed and loaded into every process that imports the tables.

A ps runs table ops without building the graph, so every importing
process registers the kernel. It is built once per source and TensorFlow
(hashed into its name) by `make setup`, or when missing under a file lock
so ranks starting together build it once. SavedModels do not use it.
"""
import fcntl
import functools
import glob
import hashlib
import os
import shutil
import subprocess
import sys

import tensorflow as tf

from estimator_scale import environment
from estimator_scale import errors

SOURCE = os.path.join(os.path.dirname(__file__), "kernels", "dynamic_rows.cc")


def directory():
  """Where the built library goes."""
  return os.environ.get(environment.KERNELS) or os.path.join(
      sys.prefix, "share", "estimator_scale")


def library_path():
  """The library's path for this source, TensorFlow and compile flags."""
  with open(SOURCE, "rb") as f:
    digest = hashlib.sha1(f.read())
  digest.update(" ".join([tf.__version__, *_flags()]).encode())
  return os.path.join(directory(), f"dynamic_rows-{digest.hexdigest()[:16]}.so")


def _flags():
  return [*tf.sysconfig.get_compile_flags(), "-O2", "-DNDEBUG", "-fPIC", "-shared",
          *tf.sysconfig.get_link_flags()]


def build():
  """Builds the library unless it is there; returns its path.

  Raises:
    errors.ConfigError: no C++ compiler, an unwritable directory, or a
      failed compile (its output in the message).
  """
  path = library_path()
  if os.path.exists(path):
    return path
  compiler = os.environ.get("CXX", "g++")
  if shutil.which(compiler) is None:
    raise errors.ConfigError(
        f"dynamic tables: building {SOURCE} needs a C++ compiler; {compiler!r} "
        "is not on PATH (install g++, or name one in CXX)")
  try:
    os.makedirs(directory(), exist_ok=True)
    lock = open(os.path.join(directory(), "build.lock"), "w")  # pylint: disable=consider-using-with
  except OSError as e:
    raise errors.ConfigError(
        f"dynamic tables: cannot write the kernel's library into "
        f"{directory()} ({e}); set {environment.KERNELS} to a directory this "
        "user can write, or build it there once as its owner: python -c 'from "
        "estimator_scale.embeddings import native; native.build()'") from e
  with lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if os.path.exists(path):  # another process built it meanwhile
      return path
    partial = f"{path}.{os.getpid()}"
    done = subprocess.run([compiler, SOURCE, "-o", partial, *_flags()],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
      raise errors.ConfigError(
          f"dynamic tables: {compiler} failed to build {SOURCE}:\n"
          f"{done.stderr[-4000:]}")
    os.rename(partial, path)
    for old in glob.glob(os.path.join(directory(), "dynamic_rows-*.so")):
      if old != path:  # another source's or TensorFlow's
        os.remove(old)
  return path


@functools.lru_cache(maxsize=None)
def ops():
  """The kernel's ops, built if need be and loaded once per process."""
  return tf.load_op_library(build())


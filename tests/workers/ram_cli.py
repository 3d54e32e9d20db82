"""Runs the CLI over data copied into TensorFlow's in-memory `ram://` file
system, which exists inside one process only (as a stand-in for gs:// and
other remote paths, without a network).

  python -m tests.workers.ram_cli LOCAL_DIR RAM_DIR -- estimator-scale FLAGS...
"""
import os
import sys

import tensorflow as tf

from estimator_scale.cli import __main__ as cli


def _copy(local_dir, ram_dir):
  tf.io.gfile.makedirs(ram_dir)
  for name in os.listdir(local_dir):
    tf.io.gfile.copy(os.path.join(local_dir, name),
                     os.path.join(ram_dir, name), overwrite=True)


if __name__ == "__main__":
  separator = sys.argv.index("--")
  _copy(*sys.argv[1:separator])
  sys.argv = sys.argv[separator + 1:]  # the program name, then its flags
  cli.run()

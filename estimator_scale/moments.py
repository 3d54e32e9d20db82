"""Where a tool acts at a checkpoint's save, a table merge or a reshard:
moments too short to hit from outside the process (the chaos driver kills hosts
inside them), so the process calls the listener's `begins(moment)`."""
import importlib
import os

import tensorflow as tf

from estimator_scale import environment
from estimator_scale import errors

MOMENTS = ("save", "merge", "reshard")


def listener():
  """The module `environment.LISTENER` names, or None where it is unset."""
  name = os.environ.get(environment.LISTENER)
  if not name:
    return None
  try:
    module = importlib.import_module(name)
  except ImportError as e:
    raise errors.ConfigError(
        f"{environment.LISTENER}={name!r} cannot be imported ({e}); valid: "
        "a module on the Python path with a begins(moment) function") from e
  if not callable(getattr(module, "begins", None)):
    raise errors.ConfigError(
        f"{environment.LISTENER}={name!r} has no begins(moment) function")
  return module


def begins(moment):
  """Tells the listener `moment` begins; returns when the listener does."""
  module = listener()
  if module is not None:
    module.begins(moment)


class _BeforeSave(tf.estimator.CheckpointSaverListener):

  def before_save(self, session, global_step_value):
    del session, global_step_value
    begins("save")


def save_listeners():
  """The saving listener that tells the listener of each save, if any."""
  return [_BeforeSave()] if listener() is not None else []

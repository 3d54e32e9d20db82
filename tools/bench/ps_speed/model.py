"""The zoo's wide & deep with one hook more: each trainer logs its runs.

The bench counts examples from what each trainer ran, not from the chief's
view of global_step: under asynchronous parameter servers a step is one
worker's update of the whole global batch, under synchronous ones an update
of the job's, and only a trainer's own runs say which batch it consumed. The
chief is not alone in starting late: either trainer may join tens of seconds
after the other, so the bench also needs each one's first run. Each trainer
appends `<time.time()> <global_step>` per run to `<task>.runs` in the
folder named by RUNS_DIR, line-buffered so the bench reads it live.
"""
import json
import os
import time

import tensorflow as tf

import estimator_scale as es
from model_zoo import wide_deep

RUNS_DIR = "ESTIMATOR_SCALE_PS_SPEED_RUNS"
"""The environment variable naming the folder of the runs' records."""


def task_name(tf_config):
  """"worker:0" of a TF_CONFIG's JSON text; "chief:0" without one."""
  if not tf_config:
    return "chief:0"
  task = json.loads(tf_config)["task"]
  return f"{task['type']}:{task['index']}"


class RunLog(tf.compat.v1.train.SessionRunHook):
  """Appends each run's end time and the global_step it read to `path`."""

  def __init__(self, path):
    self._path = path
    self._file = self._step = None

  def begin(self):
    """See base class."""
    self._step = tf.compat.v1.train.get_global_step()

  def after_create_session(self, session, coord):
    """See base class."""
    self._file = open(self._path, "a", buffering=1, encoding="ascii")

  def before_run(self, run_context):
    """See base class."""
    return tf.compat.v1.train.SessionRunArgs(self._step)

  def after_run(self, run_context, run_values):
    """See base class."""
    self._file.write(f"{time.time():.6f} {int(run_values.results)}\n")

  def end(self, session):
    """See base class."""
    self._file.close()


@es.register
class TimedWideDeep(wide_deep.WideDeep):
  """wide_deep, its runs logged (RunLog) where RUNS_DIR is set."""

  name = "wide_deep_timed"

  def training_hooks(self, features, labels):
    """See base class."""
    hooks = list(super().training_hooks(features, labels))
    folder = os.environ.get(RUNS_DIR)
    if folder:
      name = task_name(os.environ.get("TF_CONFIG"))
      hooks.append(RunLog(os.path.join(folder, f"{name}.runs")))
    return hooks

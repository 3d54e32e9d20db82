"""A hook writing what each rank holds of a model's variables, to compare.

Each rank writes `<out_dir>/<event>-<step>-of<size>-rank<r>.npz`: `start`
before the session's first update (after any restore, and after the
re-sharding of tables a restore into another number of ranks does), `end`
as training ends; a subclass adds its own events. Tables split over the
ranks are dumped as this rank holds them.
"""
import os

import numpy as np
import tensorflow as tf


class DumpHook(tf.compat.v1.train.SessionRunHook):
  """Writes this rank's variables named under `prefix` at start and end.

  Args:
    topology: the Estimator's Topology (rank and size name the files).
    out_dir: where the files go.
    prefix: the variables' names start with it (a str or a tuple of them).
  """

  def __init__(self, topology, out_dir, prefix="model/"):
    self._size = topology.num_workers
    self._rank = topology.worker_index
    self._out_dir = out_dir
    self._prefix = prefix

  def begin(self):
    every = (tf.compat.v1.global_variables() +
             tf.compat.v1.local_variables())
    self._variables = {v.op.name: v for v in every
                       if v.op.name.startswith(self._prefix)}
    self._step = tf.compat.v1.train.get_global_step()
    self._started = False

  def dump(self, session, event):
    """Writes the variables as they are now, named by `event` and step."""
    values, step = session.run([self._variables, self._step])
    np.savez(os.path.join(self._out_dir, f"{event}-{step}-of{self._size}-"
                          f"rank{self._rank}.npz"), **values)
    return step

  def before_run(self, run_context):
    # Not in after_create_session: the backend's hooks, which restore the
    # shards there, come after the caller's.
    if not self._started:
      self._started = True
      self.dump(run_context.session, "start")

  def end(self, session):
    self.dump(session, "end")

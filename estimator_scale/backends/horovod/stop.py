"""A SIGTERM on any rank stops every rank after the same update."""
import signal

from absl import logging
import tensorflow as tf


class StopFlag:
  """The stop flag of one training graph and its sum over the ranks."""

  def __init__(self):
    self._graph = None
    self._flag = None
    self._total = None

  def _current(self):
    graph = tf.compat.v1.get_default_graph()
    if self._graph is not graph:
      self._graph, self._total = graph, None
      self._flag = tf.compat.v1.placeholder_with_default(
          0.0, [], name="stop_requested")
    return self._flag

  def flag(self):
    """This graph's flag (1.0 fed on a rank that wants to stop)."""
    return self._current()

  def folded(self, total):
    """Records `total`, the flag summed over the ranks inside this graph."""
    self._current()
    self._total = total

  def tensors(self, agree):
    """(flag, total) of this graph; `agree(flag)` sums it if nothing did."""
    flag = self._current()
    if self._total is None:
      self._total = agree(flag)
    return flag, self._total


class SignalStopHook(tf.compat.v1.train.SessionRunHook):
  """Feeds a SIGTERM into the stop flag; stops when any rank asked (`agree`
  sums the flag where the reducer did not)."""

  def __init__(self, stop_flag, agree):
    self._stop_flag = stop_flag
    self._agree = agree
    self.requested = False
    self.stopped = False

  def begin(self):
    self._flag, self._total = self._stop_flag.tensors(self._agree)

  def after_create_session(self, session, coord):
    self._previous = signal.signal(signal.SIGTERM, self._on_signal)

  def _on_signal(self, signum, frame):
    del frame
    logging.warning("signal %d: stopping all workers after this update", signum)
    self.requested = True

  def before_run(self, run_context):
    return tf.compat.v1.train.SessionRunArgs(
        self._total, feed_dict={self._flag: float(self.requested)})

  def after_run(self, run_context, run_values):
    if run_values.results > 0:
      self.stopped = True
      run_context.request_stop()

  def end(self, session):
    signal.signal(signal.SIGTERM, self._previous)

"""The hooks a measured training process times itself with.

Imported by worker.py only once a kind that trains runs: the startup
wrapper times its child's start and must not import TensorFlow itself.
"""
import functools
import time

import tensorflow as tf

from tools.bench.perf import usage
from tools.bench.perf import windows


class TimingHook(tf.compat.v1.train.SessionRunHook):
  """Times one or more windows of runs after a warm-up, then stops training.

  Window i times `steps[i]` runs; windows after the first start after
  `rewarm` untimed runs, and between windows the process pauses in
  `pause_dir` while the network bench reshapes the links (windows.py). One
  window is the plain measurement. `windows` holds each window's (runs,
  seconds); `started`, `ended` and `cpu` are the first window's, and the
  peak RSS before it (`peak_before`) and within it (`window_peak`, None
  where the kernel cannot restart the peak or there are several windows).
  """

  def __init__(self, warmup, steps, rewarm=0, pause_dir=None):
    if len(steps) > 1 and pause_dir is None:
      raise ValueError(f"steps={steps}: several windows need a pause_dir "
                       "for the handshake between them")
    # (window, first run of it, last run of it), runs counted from 1.
    self._bounds, first = [], warmup + 1
    for index, count in enumerate(steps):
      self._bounds.append((index, first, first + count - 1))
      first += count + rewarm
    self._pause = functools.partial(windows.pause, pause_dir)
    self._restart_peak = len(steps) == 1
    self.runs, self.windows = 0, []
    self.started = self.ended = self.cpu = self._start = None
    self.peak_before, self.window_peak, self._restarted = 0.0, None, False

  def after_run(self, run_context, run_values):
    """See base class."""
    self.runs += 1
    for index, start, end in self._bounds:
      if self.runs == start - 1:
        self._start_window(index)
      elif self.runs == end:
        self._end_window(index, end - start + 1, run_context)

  def _start_window(self, index):
    # From the end of the run before the window: graph building, session
    # creation and the warm-up stay outside it.
    if index == 0:
      if self._restart_peak:
        self.peak_before, self._restarted = usage.restart_peak_rss()
      else:
        self.peak_before = usage.peak_rss_mib()
      self.cpu = usage.cpu_seconds()
    self._start = time.perf_counter()
    if index == 0:
      self.started = self._start

  def _end_window(self, index, runs, run_context):
    now = time.perf_counter()
    self.windows.append((runs, now - self._start))
    if index == 0:
      self.ended, self.cpu = now, usage.cpu_seconds() - self.cpu
      if self._restarted:
        self.window_peak = usage.peak_rss_mib()
    if index == len(self._bounds) - 1:
      run_context.request_stop()
    else:
      self._pause(index)


class MilestoneHook(tf.compat.v1.train.SessionRunHook):
  """Records when the session is ready and when each run ends.

  Readings of time.time(), not perf_counter: the wrapper subtracts its own
  reading from just before it started this process, and only the wall
  clock is defined alike in two processes.
  """

  def __init__(self):
    self.ready, self.run_ends = None, []

  def after_create_session(self, session, coord):
    """See base class."""
    self.ready = time.time()

  def after_run(self, run_context, run_values):
    """See base class."""
    self.run_ends.append(time.time())

"""Several timed windows in one training process, paused between them.

A process tree of 2 hosts takes longer to start (ssh, two TensorFlow
imports, graph build, broadcast) than a 20 s window lasts, so the network
bench times every link rate of a variant in one process: after each window
the ranks pause, the bench reshapes the links, and the next window starts
after a few untimed updates on the new link. The handshake is files in a
folder both sides see: each rank writes `done.<window>.<pid>` and waits
for `go.<window>`, which the bench writes once every rank is done and the
links are set (wait_and_release).
"""
import glob
import os
import time

POLL_S = 0.01
# A pause longer than this means the bench is gone: the rank gives up.
PAUSE_LIMIT_S = 120.0


def _pause(folder, window):
  with open(os.path.join(folder, f"done.{window}.{os.getpid()}"), "w",
            encoding="ascii"):
    pass
  go = os.path.join(folder, f"go.{window}")
  deadline = time.monotonic() + PAUSE_LIMIT_S
  while not os.path.exists(go):
    if time.monotonic() > deadline:
      raise RuntimeError(f"no {go} within {PAUSE_LIMIT_S:.0f} s: the bench "
                         "that reshapes the links between windows is gone")
    time.sleep(POLL_S)


def wait_and_release(folder, window, processes, between, stopped):
  """The bench's side: once `processes` ranks are done with `window`, calls
  `between()` and lets them go. Returns False if `stopped()` first."""
  pattern = os.path.join(folder, f"done.{window}.*")
  while len(glob.glob(pattern)) < processes:
    if stopped():
      return False
    time.sleep(POLL_S)
  between()
  with open(os.path.join(folder, f"go.{window}"), "w", encoding="ascii"):
    pass
  return True


def total_runs(warmup, steps, rewarm):
  """Session runs a WindowsHook needs: warm-up, windows, re-warm-ups."""
  return warmup + sum(steps) + rewarm * (len(steps) - 1)


class WindowsHook:
  """Times `steps[i]` runs per window, pausing in `folder` between windows.

  Windows after the first start after `rewarm` untimed runs. `windows`
  holds each window's (runs, seconds); `started`, `ended` and `cpu` are
  the first window's, as worker.TimingHook's. Built lazily as a
  SessionRunHook subclass, like TimingHook, so importing this module does
  not import TensorFlow.
  """

  def __new__(cls, warmup, steps, rewarm, folder):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from tools.bench import worker  # pylint: disable=g-import-not-at-top
    # (window, first run of it, last run of it), runs counted from 1.
    bounds, first = [], warmup + 1
    for index, count in enumerate(steps):
      bounds.append((index, first, first + count - 1))
      first += count + rewarm

    class _Hook(tf.compat.v1.train.SessionRunHook):

      def __init__(self):
        self.runs, self.windows = 0, []
        self.started = self.ended = self.cpu = self._start = None
        self.peak_before, self.window_peak = 0.0, None

      def before_run(self, run_context):
        for _, start, _ in bounds:
          if self.runs + 1 == start:
            self._start = time.perf_counter()
            if self.started is None:
              self.peak_before = worker.peak_rss_mib()
              self.started, self.cpu = self._start, worker.cpu_seconds()

      def after_run(self, run_context, run_values):
        self.runs += 1
        for index, start, end in bounds:
          if self.runs != end:
            continue
          now = time.perf_counter()
          self.windows.append((end - start + 1, now - self._start))
          if index == 0:
            self.ended, self.cpu = now, worker.cpu_seconds() - self.cpu
          if index == len(bounds) - 1:
            run_context.request_stop()
          else:
            _pause(folder, index)

    return _Hook()

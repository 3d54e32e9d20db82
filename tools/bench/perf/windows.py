"""Several timed windows in one training process, paused between them.

A process tree of 2 hosts takes longer to start (ssh, two TensorFlow
imports, graph build, broadcast) than a 20 s window lasts, so the network
bench times every link rate of a variant in one process: after each window
the ranks pause, the bench reshapes the links, and the next window starts
after a few untimed updates on the new link. The handshake is files in a
folder both sides see: each rank writes `done.<window>.<pid>` and waits
for `go.<window>`, which the bench writes once every rank is done and the
links are set (wait_and_release). This module imports no TensorFlow: the
bench's side runs in its TensorFlow-free driver.
"""
import glob
import os
import time

POLL_S = 0.01
# A pause longer than this means the bench is gone: the rank gives up.
PAUSE_LIMIT_S = 120.0


def pause(folder, window):
  """A rank's side: says `window` is done, waits for the bench's go."""
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
  """Session runs a TimingHook over windows `steps` needs: warm-up,
  windows, re-warm-ups."""
  return warmup + sum(steps) + rewarm * (len(steps) - 1)

"""One way for a multi-host test to wait on a running job: poll a condition
against a generous deadline, failing early, with the job's log, when the job
has already ended (or printed a traceback) and can no longer meet it."""
import time

import pytest

TAIL = 5000
"""How much of the job's log a failure shows."""


def wait_for(condition, what, deadline, proc=None, log=None, poll=0.2,
             traceback_fails=False):
  """What `condition()` returned once it held.

  Args:
    condition: called until it returns something true.
    what: names what is awaited, for the failure.
    deadline: a `time.monotonic()` time.
    proc: the job's Popen; its end before the condition holds fails.
    log: the job's log file (a Path), shown on failure.
    poll: seconds between tries.
    traceback_fails: a traceback in the log fails too (a rank that failed on
      its own leaves an elastic driver waiting for hosts until its timeout).
  """
  while True:
    found = condition()
    if found:
      return found
    text = _read(log)
    if (proc is not None and proc.poll() is not None) or (
        traceback_fails and "Traceback" in text):
      if traceback_fails:
        time.sleep(3)  # the rest of the traceback
      pytest.fail(f"the job ended before {what}: {_tail(log)}")
    if time.monotonic() >= deadline:
      pytest.fail(f"no {what} by the deadline: {_tail(log)}")
    time.sleep(poll)


def _read(log):
  return log.read_text(errors="replace") if log and log.exists() else ""


def _tail(log):
  return _read(log)[-TAIL:] or "(no log yet)"

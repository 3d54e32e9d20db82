"""One way for a multi-host test to wait on a running job: poll a condition
against a generous deadline, failing early, with the job's log, when the job
has already ended (or printed a traceback) and can no longer meet it."""
import time

import pytest

from tests.helpers import processes

TAIL = 5000
"""How much of the job's log a failure shows."""


def wait_for(condition, what, deadline, proc=None, log=None, poll=0.2,
             traceback_fails=False):
  """What `condition()` returned once it held.

  Args:
    condition: called until it returns something true.
    what: names what is awaited, for the failure.
    deadline: a `time.monotonic()` time.
    proc: the job's Popen; its end before the condition holds fails, showing
      its piped output if there is no `log`.
    log: the job's log file (a Path), or a function giving the text to show
      on failure.
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
      pytest.fail(f"the job ended before {what}: {_tail(log, proc)}")
    if time.monotonic() >= deadline:
      pytest.fail(f"no {what} by the deadline: {_tail(log)}")
    time.sleep(poll)


def until_gone(pids, seconds, output=""):
  """Waits up to `seconds` for the processes `pids` to end."""
  wait_for(lambda: not any(map(processes.alive, pids)), "end of every process",
           time.monotonic() + seconds, poll=0.1,
           log=lambda: f"alive: {[p for p in pids if processes.alive(p)]}\n"
           f"{output}")


def _read(log):
  if callable(log):
    return log()
  return log.read_text(errors="replace") if log and log.exists() else ""


def _tail(log, ended=None):
  text = _read(log)
  if not text and ended is not None and ended.stdout is not None:
    text = ended.communicate()[0] or ""
    if isinstance(text, bytes):
      text = text.decode(errors="replace")
  return text[-TAIL:] or "(no log yet)"

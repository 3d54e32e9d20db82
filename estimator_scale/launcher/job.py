"""A job's tasks: their processes, their output, and the one watch loop.

A plain launch is an elastic one with no restarts (`elastic.PLAIN`), so
both stop every task on every host when one fails or a host is lost.
"""
import contextlib
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

from estimator_scale.launcher import elastic
from estimator_scale.launcher import hosts as hosts_lib
from estimator_scale.launcher import remote


UNAVOIDABLE = (
    # tf.distribute's input path feeds each multi_worker_mirrored worker's
    # devices from a generator dataset of its own, which TensorFlow cannot
    # serialize, so tf.data's default rewrites skip it and TensorFlow's C++
    # says so once per worker; no option of the user's dataset reaches that
    # pipeline. C++ writes straight to stderr, so the launcher, which reads
    # every task's lines, is the one place that can drop it.
    re.escape("Input of GeneratorDatasetOp::Dataset will not be optimized "
              "because the dataset does not implement the "
              "AsGraphDefInternal() method needed to apply optimizations."),
    # An evaluation ends when its input does: the last step fails with
    # OutOfRange on the chief, which cancels the receives it had posted for
    # values a ps task had not sent yet, and the ps task logs each one.
    r"RecvTensor cancelled for \d+",
)
"""TensorFlow log messages (patterns of the whole message) a task prints in
jobs that work as meant, dropped by their exact text."""

_UNAVOIDABLE = re.compile("|".join(f"(?:{m})" for m in UNAVOIDABLE))


def _unavoidable(text):
  _, bracket, message = text.rstrip("\n").partition("] ")
  return bool(bracket) and _UNAVOIDABLE.fullmatch(message) is not None


def _pump(stream, prefix, out):
  for line in iter(stream.readline, b""):
    text = line.decode(errors="replace")
    if _unavoidable(text):
      continue
    out.write(f"[{prefix}] {text}")
    out.flush()


def _heartbeat(processes, stopped):
  """Writes a line to each remote task's stdin every `remote.HEARTBEAT_SECS`
  until `stopped` is set; a task that stops hearing it stops itself."""
  while not stopped.wait(remote.HEARTBEAT_SECS):
    for proc in processes:
      if proc.stdin and proc.poll() is None:
        try:
          proc.stdin.write(b"\n")
          proc.stdin.flush()
        except (OSError, ValueError):  # its ssh ended, or it is being stopped
          pass


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _dies_with(launcher):
  """A local task's preexec_fn: the task dies with the launcher however it
  ends; None where prctl is missing (not Linux). prctl is looked up here: the
  child must not load libraries before it execs."""
  try:
    prctl = ctypes.CDLL(None, use_errno=True).prctl
  except AttributeError:
    return None

  def preexec():
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != launcher:  # it ended before prctl took effect
      os._exit(128 + signal.SIGKILL)  # pylint: disable=protected-access
  return preexec


def _kill(processes, grace=15):
  """Stops every task, remote ones through their host first, so their processes
  are gone on return."""
  for proc in processes:
    if proc.stdin:  # a remote task: its host stops it when this closes
      try:
        proc.stdin.close()
      except OSError:
        pass
  deadline = time.time() + grace
  for proc in processes:
    if proc.stdin:
      try:
        proc.wait(max(0.1, deadline - time.time()))
      except subprocess.TimeoutExpired:  # its host is lost
        pass
  for proc in processes:
    if proc.poll() is None:
      try:
        os.killpg(proc.pid, signal.SIGTERM)
      except ProcessLookupError:
        pass
  deadline = time.time() + 10
  for proc in processes:
    try:
      proc.wait(max(0.1, deadline - time.time()))
    except subprocess.TimeoutExpired:
      os.killpg(proc.pid, signal.SIGKILL)
      proc.wait()


STOPPING_SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""Signals that stop the whole job rather than the launcher alone."""


@contextlib.contextmanager
def stopping_signals_recorded():
  """Records SIGTERM and SIGINT in the list it yields instead of ending the
  launcher, which must stop its tasks (in sessions of their own) first."""
  received = []
  previous = {number: signal.signal(number,
                                    lambda signum, _: received.append(signum))
              for number in STOPPING_SIGNALS}
  try:
    yield received
  finally:
    for number, handler in previous.items():
      signal.signal(number, handler)


def _signalled(number):
  """(exit code 128 + `number`, the line saying why) after a signal."""
  return (128 + number, f"got {signal.Signals(number).name}; stopping every "
          "task (SIGTERM to each task's process group, SIGKILL after a grace "
          "period)")


def why_failed(task, code):
  """One line naming the task, its host and what its exit code means."""
  if task.host and code == remote.SSH_LOST:
    return (f"lost host {task.host} ({task.job}:{task.index}): ssh could not "
            "reach it or the connection dropped")
  if task.host and code == 127:
    return (f"{task.name}: command not found on {task.host} (is the job's "
            "Python installed there at the same path?)")
  if task.host and code == 126:
    return (f"{task.name} could not start on {task.host}: the working "
            f"directory {os.getcwd()} is missing there, or the command is not "
            "executable")
  return f"{task.name} exited with {code}"


class Job:
  """One start of a cluster's tasks: their processes and output pumps.

  `tasks` are `hosts` Tasks; `remote_env` is what remote tasks get
  (`remote.forwarded_environment`); `ssh_port` None: ssh's default.
  """

  def __init__(self, command, tasks, out=sys.stdout, remote_env=None,
               ssh_port=None):
    self.tasks = list(tasks)
    self.processes, self._pumps = [], []
    cluster = hosts_lib.cluster_spec(self.tasks)
    for task in self.tasks:
      tf_config = json.dumps({"cluster": cluster,
                              "task": {"type": task.job, "index": task.index}})
      if task.host:
        argv, payload = remote.remote_command(
            task.host, command, dict(remote_env or {}, TF_CONFIG=tf_config),
            os.getcwd(), ssh_port)
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT,
                                start_new_session=True)
        proc.stdin.write(payload)
        proc.stdin.flush()
      else:
        proc = subprocess.Popen(command, env=dict(os.environ,
                                                  TF_CONFIG=tf_config),
                                stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT,
                                start_new_session=True,
                                preexec_fn=_dies_with(os.getpid()))
      pump = threading.Thread(target=_pump, args=(proc.stdout, task.name, out),
                              daemon=True)
      pump.start()
      self.processes.append(proc)
      self._pumps.append(pump)
    self._stopped = threading.Event()
    self._beat = threading.Thread(target=_heartbeat,
                                  args=(self.processes, self._stopped),
                                  daemon=True)
    self._beat.start()

  def failed(self):
    """(task, exit code) of the first task that failed, or None."""
    for task, proc in zip(self.tasks, self.processes):
      if proc.poll() not in (None, 0):
        return task, proc.returncode
    return None

  def succeeded(self):
    """Whether every training task exited 0 (parameter servers never exit)."""
    return all(p.poll() == 0 for t, p in zip(self.tasks, self.processes)
               if t.job != "ps")

  def stop(self):
    """Stops every task that still runs; returns once they are gone."""
    self._stopped.set()
    self._beat.join()
    _kill(self.processes)
    for pump in self._pumps:
      pump.join(timeout=5)


def exit_code(code):
  """A task's code as the launcher's: a signal's death as 128 + signal."""
  return code if code >= 0 else 128 - code


def _watch(job, returning, deadline, received):
  """Polls `job` until it ends, fails, times out, may grow, or a signal came.

  Returns:
    ("done", None), ("timeout", None), ("failed", (task, code)),
    ("grow", hosts that answer again) or ("signal", its number).
  """
  while True:
    if received:
      return "signal", received[0]
    failed = job.failed()
    if failed:
      return "failed", failed
    if job.succeeded():
      return "done", None
    if deadline and time.time() > deadline:
      return "timeout", None
    back = returning.ready()
    if back:
      return "grow", back
    time.sleep(0.2)


def _ending(outcome, detail, failures, policy, timeout):
  """(exit code, line) where `outcome` ends the job; (None, None) where it
  restarts."""
  if outcome == "done":
    return 0, None
  if outcome == "timeout":
    return 124, f"timed out after {timeout}s; stopping all tasks"
  if outcome == "grow":
    return None, None
  if outcome == "signal":
    return _signalled(detail)
  task, code = detail
  line = elastic.final_line(why_failed(task, code), code, failures, policy)
  return (exit_code(code), line) if line else (None, None)


def run(command, hosts, ps=0, chief=False, port=hosts_lib.DEFAULT_PORT,
        timeout=None, out=sys.stdout, extra_env=(), ssh_port=None,
        policy=elastic.PLAIN, received=()):
  """Runs `command` as a TF_CONFIG cluster on `hosts`; the job's exit code.

  Args:
    command: argv of every task.
    hosts: [(host, slots)], or [(None, workers)] for this machine.
    ps, chief, port: as for `hosts.host_tasks`.
    timeout: seconds before the whole job is stopped (exit 124).
    extra_env: `-x` items for remote tasks.
    policy: `elastic.Policy`; `elastic.PLAIN` never restarts.
    received: `stopping_signals_recorded`'s list; once a signal is there,
      every task is stopped and the job ends with 128 + it.
  """
  remote_env = remote.forwarded_environment(os.environ, extra_env)
  members, failures = list(hosts), 0
  deadline = time.time() + timeout if timeout else None
  while True:
    if received:  # sent while the last attempt's tasks were being stopped
      code, line = _signalled(received[0])
      out.write(f"[launch] {line}\n")
      return code
    job = Job(command, hosts_lib.cluster_tasks(members, ps, chief, port),
              out, remote_env, ssh_port)
    outside = [(h, slots) for h, slots in hosts if (h, slots) not in members]
    # A host's tasks take ports from `port` up, a ps task among them.
    returning = elastic.Returning(
        [h for h, _ in outside], ssh_port, policy,
        {h: range(port, port + slots + ps) for h, slots in outside})
    try:
      outcome, detail = _watch(job, returning, deadline, received)
      code, line = _ending(outcome, detail, failures, policy, timeout)
      if line:
        out.write(f"[launch] {line}\n")
    finally:
      returning.stop()
      job.stop()
    if code is not None:
      return code
    old = hosts_lib.training_tasks(members)
    if outcome == "grow":
      members = [h for h in hosts if h in members or h[0] in detail]
      out.write(f"[launch] {', '.join(sorted(detail))} answers again; "
                f"restart: {old} -> {hosts_lib.training_tasks(members)} "
                f"workers, {elastic.resumed(policy)}\n")
      continue
    task, code = detail
    why = why_failed(task, code)
    failures += 1
    if members[0][0] is not None:
      alive = remote.answering([h for h, _ in members], ssh_port)
      lost = [h for h, _ in members if h not in alive]
      members = [m for m in members if m[0] in alive]
    else:
      lost = []
    left = hosts_lib.training_tasks(members)
    if left < max(policy.min_workers, 1):
      out.write(f"[launch] {why}; {left} worker(s) left, fewer than "
                f"--min_workers {policy.min_workers}; stopping every task\n")
      return exit_code(code)
    without = f" without {', '.join(lost)}" if lost else ""
    out.write(f"[launch] {why}; restart {failures} of {policy.max_restarts}: "
              f"{old} -> {left} workers{without}, {elastic.resumed(policy)}\n")

"""Jobs on the rig's hosts (tools/rig/cluster.py): their commands and what they
leave behind.

What runs in the hosts is named by absolute path: a command started over
ssh gets sshd's environment (root's login PATH), not this process's. Every
job starts from host1 with a minimal environment, as a user would start it.
"""
import os
import subprocess
import time

from tests.helpers import waiting
from tests.helpers.checkpoints import checkpoint_step
from tests.helpers.processes import ROOT

VENV_BIN = os.path.join(ROOT, ".venv", "bin")
PYTHON = os.path.join(VENV_BIN, "python")
HOROVODRUN = os.path.join(VENV_BIN, "horovodrun")
HOROVODRUN_GLOO = [HOROVODRUN, "--gloo", "--start-timeout", "120"]
"""horovodrun over the rig's hosts: each host's first check can take longer
than horovodrun's default 30 s while other tests load the two cores."""

ENV = {"PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "2"}
"""What a job starts with: horovodrun forwards its environment to every rank,
so this is all a rank gets besides Horovod's own variables."""

LAUNCH_ENV = dict(ENV, ESTIMATOR_SCALE_COLLECTIVE_TIMEOUT="20")
"""ENV for TF_CONFIG jobs: a peer that died or was cut off fails the
collective in 20 s."""


def train_argv(model_dir, *flags):
  """The CLI's training command for digits_cnn on Horovod, as ranks run it."""
  return [PYTHON, "-m", "estimator_scale.cli", "--distribution=horovod",
          "--model=digits_cnn", f"--model_dir={model_dir}", *flags]


def horovodrun_argv(hosts, *command, hostfile=None, options=()):
  """horovodrun with Gloo, one rank per host: `-H` or, given, `--hostfile`."""
  placement = (["--hostfile", str(hostfile)] if hostfile else
               ["-H", ",".join(f"{h}:1" for h in hosts)])
  return [*HOROVODRUN_GLOO, *options, "-np", str(len(hosts)), *placement,
          *command]


def launch_argv(hosts, train_flags, ps=0, forward=()):
  """estimator-scale-launch over `hosts` ("host1,host2") training with the
  CLI's `train_flags`; `forward` names variables it passes to every task."""
  return ([PYTHON, "-m", "estimator_scale.launcher", "--hosts", hosts] +
          (["--ps", str(ps)] if ps else []) +
          [arg for name in forward for arg in ("-x", name)] +
          ["--", PYTHON, "-m", "estimator_scale.cli"] + train_flags)


def discovery(directory, *hosts):
  """horovodrun's host discovery over a file: returns (the hosts file, one
  slot on each of `hosts` to begin with; the script that prints it). A test
  rewrites the file to add or drop hosts while the job runs."""
  hosts_file = directory / "hosts"
  hosts_file.write_text("".join(f"{host}:1\n" for host in hosts))
  script = directory / "discover.sh"
  script.write_text(f"#!/bin/sh\ncat {hosts_file}\n")
  script.chmod(0o755)
  return hosts_file, script


def start_until_checkpoint(host, argv, model_dir, env, step=50, limit=240):
  """Starts `argv` from `host`; returns the process once model_dir holds a
  checkpoint of `step` or later, so that a fault after it leaves something
  to resume. The job's death before then fails the test with its output."""
  proc = host.popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, text=True)
  waiting.wait_for(lambda: checkpoint_step(model_dir) >= step,
                   f"checkpoint of step {step}", time.monotonic() + limit,
                   proc=proc, poll=0.5)
  return proc


def finish(proc, log, deadline):
  """Waits for the job `proc` until `deadline` (time.monotonic()), ended
  outright past it; asserts that it exited 0 and returns its `log`'s text,
  whose end the assertion shows."""
  try:
    proc.wait(timeout=max(1, deadline - time.monotonic()))
  finally:
    if proc.poll() is None:
      proc.kill()
  text = log.read_text()
  assert proc.returncode == 0, text[-5000:]
  return text


def job_processes(host):
  """The host's live processes that belong to a job: all but its sshd's
  (a zombie, already dead, has an empty command line)."""
  left = []
  for pid in host.pids():
    try:
      with open(f"/proc/{pid}/cmdline", "rb") as f:
        cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):  # gone meanwhile
      continue
    if cmdline and "sshd" not in cmdline:
      left.append(cmdline)
  return left


def assert_no_job_processes_within(hosts, seconds):
  """Fails unless every host's job processes are gone within `seconds`: a
  task's watcher may still be stopping its process group when the launcher
  returns, but nothing may stay."""
  waiting.wait_for(lambda: not any(job_processes(h) for h in hosts),
                   "end of every job process", time.monotonic() + seconds,
                   log=lambda: str({h.name: job_processes(h) for h in hosts}),
                   poll=0.5)

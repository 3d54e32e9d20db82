"""A job that works reads as one that worked, on every host.

Four short 2-host jobs run back to back on one rig, each started from host1
with only PATH set, as a user starts them: multi_worker_mirrored and
parameter_server through estimator-scale-launch --hosts, Horovod through
horovodrun -H, and an elastic Horovod job whose discovery script drops
host2 after the first commit. Their whole output, every host's, holds no
line of warning or error severity, no traceback, no "terminate called" and
nothing "Fatal"; the host that left says so in one line and exits 0 (the
driver prints an exit status only when it is not 0), and the others finish.
"""
import json
import re
import subprocess
import time

from tests.helpers import waiting
from tests.helpers.checkpoints import checkpoint_step
from tests.helpers.processes import ROOT
from tests.helpers.rig import (HOROVODRUN_GLOO, assert_no_job_processes_within,
                               discovery, finish, launch_argv,
                               horovodrun_argv, train_argv)

USER_ENV = {"PATH": "/usr/bin:/bin"}
"""What a user's shell gives the job: no TF_CPP_MIN_LOG_LEVEL, nothing
quietened."""

STEPS = 60
COMMIT = 20

_PREFIX = re.compile(r"^(\[[^\]]*\] |\[\d+\]<std(?:out|err)>:)")
_BAD = re.compile(
    r"^[EWF]\d{4} "                        # absl's and TensorFlow's Python
    r"|^\d{4}-\d\d-\d\d [\d:.]+: [EWF] "   # TensorFlow's C++
    r"|WARNING:|ERROR:|Warning:|Traceback|terminate called|Fatal")


def bad_lines(text):
  """The lines of a job's output that look like a warning or a failure."""
  return [line for line in text.splitlines()
          if _BAD.search(_PREFIX.sub("", line))]


def _summary(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def _run(host, argv):
  proc = host.run(argv, cwd=ROOT, env=USER_ENV, timeout=400)
  text = proc.stdout + proc.stderr
  assert proc.returncode == 0, text[-4000:]
  return text


def _elastic_job(host1, tmp_path):
  """Elastic Horovod on host1 and host2; host2 leaves after a commit."""
  hosts, discover = discovery(tmp_path, "host1", "host2")
  model_dir = tmp_path / "elastic"
  argv = [*HOROVODRUN_GLOO, "-np", "2", "--min-np", "1", "--max-np", "2",
          "--host-discovery-script", str(discover),
          *train_argv(model_dir, "--train_steps=1000",
                      f"--commit_every_n_steps={COMMIT}",
                      f"--summary_json={tmp_path / 'elastic.json'}")]
  log = tmp_path / "elastic.log"
  with open(log, "w") as out:
    proc = host1.popen(argv, cwd=ROOT, env=USER_ENV, stdout=out,
                       stderr=subprocess.STDOUT)
  deadline = time.monotonic() + 300
  try:
    waiting.wait_for(lambda: checkpoint_step(model_dir) >= COMMIT,
                     f"checkpoint of step {COMMIT}", deadline, proc=proc,
                     log=log, poll=0.3)
    hosts.write_text("host1:1\n")
  except BaseException:
    proc.kill()
    raise
  return finish(proc, log, deadline)


def _check(name, text):
  assert not bad_lines(text), f"{name}:\n" + "\n".join(bad_lines(text))
  return text


def test_successful_jobs_print_no_warning_or_error_on_any_host(cluster,
                                                               tmp_path):
  host1, host2 = cluster(2, loopback_hostname=True).hosts
  started = time.monotonic()
  common = [f"--train_steps={STEPS}"]
  _check("multi_worker_mirrored", _run(host1, launch_argv(
      "host1,host2", ["--distribution=multi_worker_mirrored",
                      f"--model_dir={tmp_path / 'mwm'}",
                      f"--export_dir={tmp_path / 'export'}",
                      f"--summary_json={tmp_path / 'mwm.json'}", *common])))
  _check("parameter_server", _run(host1, launch_argv(
      "host1,host2", ["--distribution=parameter_server",
                      f"--model_dir={tmp_path / 'ps'}",
                      f"--summary_json={tmp_path / 'ps.json'}", *common],
      ps=1)))
  _check("horovod", _run(host1, horovodrun_argv(
      ["host1", "host2"], *train_argv(
          tmp_path / "hvd", f"--summary_json={tmp_path / 'hvd.json'}",
          *common))))
  for name in ("mwm", "ps", "hvd"):
    result = _summary(tmp_path / f"{name}.json")
    assert (result["global_step"], result["workers"]) == (STEPS, 2), result

  elastic = _check("elastic Horovod", _elastic_job(host1, tmp_path))
  print(f"four jobs: {time.monotonic() - started:.0f} s")
  left = [l for l in elastic.splitlines() if "left the job" in l]
  assert [_PREFIX.sub("", l) for l in left] == [
      "elastic Horovod: host host2 left the job (the host discovery script "
      "no longer lists it); this rank ends, the others go on"], elastic
  assert "exit with status code" not in elastic, elastic
  assert re.search(r"elastic Horovod: 2 -> 1 ranks \(the hosts changed\)",
                   elastic), elastic
  result = _summary(tmp_path / "elastic.json")
  assert result["global_step"] == 1000 and result["workers"] == 1, result
  # helpers such as multiprocessing's take a while
  assert_no_job_processes_within((host1, host2), 30)

"""Where checkpoints and data live when hosts share no disk, on the rig.

Each host's /mnt/local is a private tmpfs: its own disk, which no other host
sees. Horovod keeps rank 0's checkpoint as the truth (the start step and the
variables are broadcast from it, rank 0 evaluates and exports), so each
host's own model_dir works. TF_CONFIG workers each read model_dir, so they
must share it: on their own disks they fail at start in one line. Object
storage is what clusters share: a storage host serves S3 (moto's server)
and two hosts train, resume and exit 0 with model_dir and data on s3://.
"""
import json
import re
import subprocess
import time

import pytest

from tests.helpers import waiting
from tests.helpers.results import (load_results, load_workers, max_difference,
                                   trained_variables)
from tests.helpers.processes import ROOT
from tests.helpers.rig import (ENV, HOROVODRUN_GLOO, PYTHON,
                               assert_no_job_processes_within, launch_argv)

LOCAL = "/mnt/local"
S3_PORT = 9000
S3_ENV = {"S3_ENDPOINT": f"http://host3:{S3_PORT}", "S3_USE_HTTPS": "0",
          "AWS_ACCESS_KEY_ID": "rig", "AWS_SECRET_ACCESS_KEY": "rig-secret",
          "AWS_REGION": "us-east-1"}


def _listing(host, path):
  """The names under `path` as `host` sees them ([] if it has none)."""
  proc = host.run(["find", path, "-type", "f"])
  return sorted(proc.stdout.split()) if proc.returncode == 0 else []


def _horovod_run(host1, out, steps):
  """A 2-host Horovod job of tests/workers/dump_run from host1, each rank's
  model_dir and export on its own host's disk; its per-rank results."""
  proc = host1.run(
      [*HOROVODRUN_GLOO, "-np", "2", "-H", "host1:1,host2:1", PYTHON,
       "-m", "tests.workers.dump_run", f"--out_dir={out}",
       f"--model_dir={LOCAL}/run", f"--export_dir={LOCAL}/export",
       "--distribution=horovod", "--case=mlp", "--global_batch_size=8",
       f"--steps={steps}", "--save_checkpoints_steps=5", "--evaluate"],
      cwd=ROOT, env=ENV, timeout=300)
  assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
  results, workers = load_results(out), load_workers(out)
  assert len(results) == len(workers) == 2
  assert max_difference(trained_variables(workers[0]),
                        trained_variables(workers[1])) <= 1e-5
  return results


def test_horovod_trains_and_resumes_with_model_dir_on_each_hosts_disk(
    cluster, tmp_path):
  host1, host2 = cluster(2, loopback_hostname=True, local_disk=LOCAL).hosts
  fresh = _horovod_run(host1, tmp_path / "fresh", steps=20)
  assert [r["last_step"] for r in fresh] == [20, 20]
  # Rank 0 evaluated and exported on its own disk; every rank got both.
  assert fresh[0]["eval"] == fresh[1]["eval"]
  assert fresh[0]["export"] == fresh[1]["export"]
  export = fresh[0]["export"]
  assert f"{export}/saved_model.pb" in _listing(host1, f"{LOCAL}/export")
  assert f"{LOCAL}/run/model.ckpt-20.index" in _listing(host1, f"{LOCAL}/run")
  assert not [p for p in _listing(host2, LOCAL) if "model.ckpt" in p or
              "saved_model" in p]
  # Resumed: host2 has no checkpoint, yet both ranks go on from rank 0's
  # step with rank 0's variables (the identical variables checked above).
  resumed = _horovod_run(host1, tmp_path / "resumed", steps=30)
  assert resumed[0]["first_step"] == 20
  assert [r["last_step"] for r in resumed] == [30, 30]
  assert f"{LOCAL}/run/model.ckpt-30.index" in _listing(host1, f"{LOCAL}/run")
  assert not [p for p in _listing(host2, LOCAL) if "model.ckpt" in p]


@pytest.mark.parametrize("distribution,resumed", [
    ("multi_worker_mirrored", False), ("parameter_server", True)])
def test_tf_config_workers_refuse_model_dirs_they_do_not_share(
    cluster, tmp_path, distribution, resumed):
  host1, host2 = cluster(2, local_disk=LOCAL).hosts
  ps = 1 if distribution == "parameter_server" else 0
  flags = [f"--distribution={distribution}", "--model=digits_mlp",
           f"--model_dir={LOCAL}/run", "--save_checkpoints_steps=10"]
  env = dict(ENV, ESTIMATOR_SCALE_SHARED_DIR_WAIT="5")
  if resumed:  # host1 alone trained first: its disk holds a checkpoint
    proc = host1.run(launch_argv("host1", flags + ["--train_steps=20"], ps),
                     cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert f"{LOCAL}/run/model.ckpt-20.index" in _listing(host1,
                                                          f"{LOCAL}/run")
  start = time.monotonic()
  proc = host1.run(launch_argv("host1,host2", flags + ["--train_steps=40"],
                                ps), cwd=ROOT, env=env, timeout=300)
  log = proc.stdout + proc.stderr
  assert proc.returncode == 2, log[-4000:]
  errors = [l for l in log.splitlines() if "estimator-scale: error:" in l]
  assert len(errors) == 1, log[-4000:]
  assert errors[0].startswith("[host2 worker:"), errors
  assert f"--model_dir={LOCAL}/run:" in errors[0], errors
  assert "shared file system" in errors[0] and "s3://" in errors[0], errors
  assert time.monotonic() - start < 120
  assert_no_job_processes_within((host1, host2), 10)


def _wait_for_server(host, timeout=60):
  """Polls the S3 endpoint from `host` until it answers."""
  probe = ("import urllib.request, sys; "
           "urllib.request.urlopen(sys.argv[1], timeout=2)")
  waiting.wait_for(lambda: host.run([PYTHON, "-c", probe,
                                    S3_ENV["S3_ENDPOINT"]],
                                   env=ENV).returncode == 0,
                   "S3 server", time.monotonic() + timeout, poll=0.5)


def _s3_keys(host, bucket):
  """Object keys of `bucket`, listed from `host` with boto3 (moto's)."""
  script = ("import boto3, os, sys; s3 = boto3.client('s3', endpoint_url="
            "os.environ['S3_ENDPOINT']); print('\\n'.join(o['Key'] for o in "
            "s3.list_objects_v2(Bucket=sys.argv[1]).get('Contents', [])))")
  proc = host.run([PYTHON, "-c", script, bucket], env=dict(ENV, **S3_ENV))
  assert proc.returncode == 0, proc.stderr[-2000:]
  return proc.stdout.split()


def test_model_dir_and_data_on_s3_shared_by_two_hosts(cluster, tmp_path):
  host1, host2, host3 = cluster(3, local_disk=LOCAL).hosts
  with open(tmp_path / "s3.log", "w") as server_log:
    server = host3.popen([PYTHON, "-m", "moto.server", "-H", "0.0.0.0",
                          "-p", str(S3_PORT)], env=ENV,
                         stdout=server_log, stderr=subprocess.STDOUT)
  try:
    _wait_for_server(host1)
    env = dict(ENV, **S3_ENV)
    written = host1.run([PYTHON, "-m", "tests.workers.s3_digits", "rig"],
                        cwd=ROOT, env=env, timeout=120)
    assert written.returncode == 0, (written.stdout + written.stderr)[-3000:]
    assert len(written.stdout.split()) == 8, written.stdout
    summary = tmp_path / "summary.json"
    flags = ["--distribution=multi_worker_mirrored", "--model=digits_mlp",
             "--model_dir=s3://rig/run", "--save_checkpoints_steps=50",
             "--log_every_n_steps=10",
             "--train_data=s3://rig/digits/train-*.tfrecord",
             "--eval_data=s3://rig/digits/test-*.tfrecord",
             f"--summary_json={summary}"]
    # A fresh run, then one resumed from its checkpoint: each logs its
    # progress from the step it started at.
    for start, steps in ((0, 100), (100, 150)):
      proc = host1.run(launch_argv("host1,host2",
                                    flags + [f"--train_steps={steps}"],
                                    forward=sorted(S3_ENV)),
                       cwd=ROOT, env=env, timeout=300)
      log = proc.stdout + proc.stderr
      assert proc.returncode == 0, log[-4000:]
      assert "pure virtual" not in log, log[-4000:]
      progress = [int(s) for s in re.findall(r"progress: step (\d+)", log)]
      assert progress and start < min(progress) <= start + 20, log[-4000:]
      result = json.loads(summary.read_text())
      assert result["workers"] == 2 and result["global_step"] == steps
      assert f"run/model.ckpt-{steps}.index" in _s3_keys(host1, "rig")
    assert result["eval"]["accuracy"] >= 0.9, result
    # Nothing of the job touched the training hosts' own disks.
    assert not _listing(host1, LOCAL) and not _listing(host2, LOCAL)
  finally:
    server.kill()
    server.wait()

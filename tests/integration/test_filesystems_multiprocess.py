"""The CLI on s3:// paths, against an S3-compatible server on this machine
(moto's, on a loopback port): it exits with its real status, never with
tensorflow-io's abort at exit; without the extra, one line names it.
"""
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from tests.helpers import waiting
from tests.helpers.processes import PYTHON, ROOT, worker_env


CLI = [PYTHON, "-m", "estimator_scale.cli", "--model=digits_mlp",
       "--train_steps=20", "--log_every_n_steps=10"]


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _answers(url):
  """Whether a PUT to `url` succeeds (the S3 server makes the bucket)."""
  try:
    urllib.request.urlopen(urllib.request.Request(url, method="PUT"),
                           timeout=2).close()
    return True
  except (urllib.error.URLError, ConnectionError):
    return False


@pytest.fixture(scope="module")
def s3_env(tmp_path_factory):
  """The environment of a job on a fresh S3 server with a bucket "test"."""
  pytest.importorskip("moto")
  pytest.importorskip("tensorflow_io")
  endpoint = f"http://127.0.0.1:{_free_port()}"
  log = open(tmp_path_factory.mktemp("s3") / "server.log", "w")
  server = subprocess.Popen(
      [PYTHON, "-m", "moto.server", "-H", "127.0.0.1", "-p",
       endpoint.rsplit(":", 1)[1]], stdout=log, stderr=subprocess.STDOUT)
  try:
    waiting.wait_for(lambda: _answers(f"{endpoint}/test"), "S3 server",
                     time.monotonic() + 60, proc=server, poll=0.3)
    yield dict(worker_env(), S3_ENDPOINT=endpoint, S3_USE_HTTPS="0",
               AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test-secret",
               AWS_REGION="us-east-1")
  finally:
    server.kill()
    server.wait()
    log.close()


def _cli(flags, env):
  return subprocess.run(CLI + flags, cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=240)


def test_a_run_on_s3_exits_0(s3_env, tmp_path):
  summary = tmp_path / "summary.json"
  proc = _cli(["--model_dir=s3://test/run", "--export_dir=s3://test/export",
               f"--summary_json={summary}"], s3_env)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "pure virtual" not in proc.stderr
  assert '"global_step": 20' in summary.read_text()


def test_a_failure_on_s3_keeps_its_status(s3_env):
  # A bucket that does not exist: TensorFlow's error, with its traceback.
  proc = _cli(["--model_dir=s3://missing/run"], s3_env)
  assert proc.returncode == 1, proc.stderr[-3000:]
  assert "NoSuchBucket" in proc.stderr and "Traceback" in proc.stderr
  assert "pure virtual" not in proc.stderr
  # A configuration error: one line, status 2.
  proc = _cli(["--model_dir=s3://test/run2",
               "--train_data=s3://test/none-*.tfrecord",
               "--eval_data=s3://test/none-*.tfrecord"], s3_env)
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert proc.stderr.strip().splitlines()[-1] == (
      "estimator-scale: error: TFRecord pattern 's3://test/none-*.tfrecord' "
      "matches no files; check the path (globs like data/train-*.tfrecord "
      "are allowed)")


def test_without_the_extra_an_s3_path_is_one_line():
  hide = ("import sys; sys.modules['tensorflow_io'] = None; "
          "from estimator_scale.cli import __main__ as cli; "
          "sys.argv[0] = 'estimator-scale'; cli.run()")
  proc = subprocess.run(
      [PYTHON, "-c", hide, "--model_dir=s3://bucket/run"], cwd=ROOT,
      env=worker_env(), capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines() == [
      "estimator-scale: error: --model_dir=s3://bucket/run needs the s3 file "
      "system of tensorflow-io: pip install tensorflow-io==0.36.0"]

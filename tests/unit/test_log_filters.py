"""Logs that read as what happened: what is dropped is exactly the expected,
every other warning and error still shows; a rank whose host left an elastic
job ends with status 0 and one line; the chief of a TF_CONFIG job leaves
last. The jobs themselves run on the rig (tests/multihost/test_clean_logs.py).
"""
import http.server
import io
import logging as std_logging
import socket
import threading
import warnings

import pytest

from estimator_scale import stack
from estimator_scale.backends import cluster_exit
from estimator_scale.backends.horovod import elastic
from estimator_scale.cli import logs
from estimator_scale.launcher import job


@pytest.fixture(autouse=True)
def _logging_restored(monkeypatch):
  """configure() changes process-wide state: put it back for other tests."""
  tf_logger = std_logging.getLogger("tensorflow")
  saved = (list(tf_logger.filters), list(tf_logger.handlers), tf_logger.level,
           tf_logger.propagate, logs.logging.get_verbosity())
  monkeypatch.setattr(logs, "_asked_verbosity", None)
  with warnings.catch_warnings():
    yield
  tf_logger.filters[:], tf_logger.handlers[:] = saved[0], saved[1]
  tf_logger.setLevel(saved[2])
  tf_logger.propagate = saved[3]
  logs.logging.set_verbosity(saved[4])


def _record(path, message, level=std_logging.WARNING):
  return std_logging.LogRecord("tensorflow", level, path, 1, message, None,
                               None)


def test_only_the_expected_tensorflow_records_are_dropped():
  logs.configure()
  tf_logger = std_logging.getLogger("tensorflow")
  path, message = stack.EXPECTED[0]
  assert not tf_logger.filter(_record(f"/x/{path}", message))
  assert tf_logger.filter(_record(f"/x/{path}", "Skipped evaluation since "
                                  "`eval_fn` is not passed in."))
  assert tf_logger.filter(_record("/x/other.py", message))
  assert tf_logger.filter(_record(f"/x/{path}", "it failed",
                                  std_logging.ERROR))
  step_path, step_message = stack.EXPECTED[1]
  assert not tf_logger.filter(_record(
      f"/x/{step_path}", step_message + " Current value (could be stable): "
      "56 vs previous value: 56."))
  assert tf_logger.filter(_record(f"/x/{step_path}", "Saving checkpoints"))


def test_a_library_run_drops_them_too():
  """No command line: what importing a public name sets up (stack.quiet)."""
  stack.quiet()
  tf_logger = std_logging.getLogger("tensorflow")
  step_path, step_message = stack.EXPECTED[1]
  assert not tf_logger.filter(_record(
      f"/x/{step_path}", step_message + " Current value (could be stable): "
      "3 vs previous value: 3."))
  assert tf_logger.filter(_record(f"/x/{step_path}", "Saving checkpoints"))


def test_the_tf_data_options_warning_is_dropped_and_no_other():
  logs.configure()
  with warnings.catch_warnings(record=True) as caught:
    warnings.warn(logs.OPTIONS_IN_GRAPH_MODE + ", their implementation has "
                  "moved", UserWarning)
    warnings.warn("To make it possible to do something else", UserWarning)
    warnings.warn("the user's own warning", UserWarning)
  assert [str(w.message) for w in caught] == [
      "To make it possible to do something else", "the user's own warning"]


def test_a_worker_that_becomes_the_chief_logs_at_the_verbosity_asked():
  logs.logging.set_verbosity(logs.logging.INFO)
  logs.configure(is_chief=False)
  assert logs.logging.get_verbosity() == logs.logging.WARNING
  logs.configure(is_chief=True)  # an elastic job's new rank 0
  assert logs.logging.get_verbosity() == logs.logging.INFO


def test_the_launcher_drops_the_unavoidable_line_and_keeps_the_rest():
  lines = [
      "2026-11-25 18:29:05.036254: W tensorflow/core/framework/dataset.cc:959]"
      " Input of GeneratorDatasetOp::Dataset will not be optimized because "
      "the dataset does not implement the AsGraphDefInternal() method needed "
      "to apply optimizations.\n",
      "2026-12-05 13:54:13.461858: W tensorflow/core/distributed_runtime/rpc/"
      "grpc_worker_service.cc:512] RecvTensor cancelled for 80453593540838205"
      "\n",
      "2026-11-25 18:29:05.036254: W tensorflow/core/framework/dataset.cc:960]"
      " Input of GeneratorDatasetOp::Dataset is something else.\n",
      "2026-11-25 18:29:05.036254: E tensorflow/core/common_runtime/"
      "base_collective_executor.cc:249] BaseCollectiveExecutor::StartAbort\n",
      "2026-12-05 13:54:13.461858: W tensorflow/core/distributed_runtime/rpc/"
      "grpc_worker_service.cc:512] RecvTensor cancelled for a reason\n",
      "Traceback (most recent call last):\n",
  ]
  out = io.StringIO()
  job._pump(io.BytesIO("".join(lines).encode()), "host2 worker:1", out)
  assert out.getvalue() == "".join(f"[host2 worker:1] {l}" for l in lines[2:])


def test_the_chief_waits_until_the_workers_processes_are_gone():
  listener = socket.socket()
  listener.bind(("127.0.0.1", 0))
  listener.listen()
  live = f"127.0.0.1:{listener.getsockname()[1]}"
  closed = socket.socket()
  closed.bind(("127.0.0.1", 0))  # bound, never listening: refused
  gone = f"127.0.0.1:{closed.getsockname()[1]}"
  try:
    assert cluster_exit.wait_until_gone([gone], timeout=5) == []
    assert cluster_exit.wait_until_gone([live, gone], timeout=0.5) == [live]
    threading.Timer(0.5, listener.close).start()
    assert cluster_exit.wait_until_gone([live], timeout=10) == []
  finally:
    listener.close()
    closed.close()


def test_without_a_coordination_service_nobody_waits():
  assert cluster_exit.leave_in_order({}) is False


class _Driver(http.server.BaseHTTPRequestHandler):
  """horovodrun's elastic driver answering a slot's rank and size."""
  answers = {}
  asked = []

  def do_GET(self):  # pylint: disable=invalid-name
    self.asked.append(self.path)
    body = self.answers[self.path].encode()
    self.send_response(200)
    self.send_header("Content-Length", str(len(body)))
    self.end_headers()
    self.wfile.write(body)

  def log_message(self, *args):
    del args


class _Horovod:
  def __init__(self, environ):
    self.environ, self.calls = environ, []

  def shutdown(self):
    self.calls.append("shutdown")

  def init(self):
    self.calls.append(("init", self.environ.get("HOROVOD_ELASTIC"),
                       self.environ["HOROVOD_RANK"]))


@pytest.fixture
def driver():
  server = http.server.HTTPServer(("127.0.0.1", 0), _Driver)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  _Driver.asked.clear()
  yield server
  server.shutdown()
  server.server_close()


def _rank_environ(server):
  return {"HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1",
          "HOROVOD_GLOO_RENDEZVOUS_PORT": str(server.server_address[1]),
          "HOROVOD_HOSTNAME": "host2", "HOROVOD_LOCAL_RANK": "0",
          "HOROVOD_RANK": "1", "HOROVOD_ELASTIC": "1"}


def test_a_rank_whose_host_left_the_job_ends_with_status_0(driver, capsys):
  _Driver.answers = {"/rank_and_size/host2:0": "-1,-1,-1,-1,-1,-1"}
  environ = _rank_environ(driver)
  hvd = _Horovod(environ)
  with pytest.raises(SystemExit) as ended:
    elastic._rejoin(hvd, environ)
  assert ended.value.code == 0
  assert hvd.calls == ["shutdown"]  # Horovod never asks, so never aborts
  out = capsys.readouterr()
  assert out.out.splitlines() == [
      "elastic Horovod: host host2 left the job (the host discovery script "
      "no longer lists it); this rank ends, the others go on"]
  assert not out.err


def test_a_rank_that_stays_starts_from_the_drivers_answer(driver):
  _Driver.answers = {"/rank_and_size/host2:0": "0,2,0,1,0,2"}
  environ = _rank_environ(driver)
  hvd = _Horovod(environ)
  elastic._rejoin(hvd, environ)
  # Asked once (the driver counts each question as the slot being ready);
  # Horovod starts from the answer without asking again.
  assert _Driver.asked == ["/rank_and_size/host2:0"]
  assert hvd.calls == ["shutdown", ("init", None, "0")]
  assert environ["HOROVOD_ELASTIC"] == "1"
  assert [environ[name] for name in elastic._SLOT_VARIABLES] == [
      "0", "2", "0", "1", "0", "2"]

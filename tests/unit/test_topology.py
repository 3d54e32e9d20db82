"""Topology from TF_CONFIG and the run-config builder's refusals."""
import json
import subprocess

import pytest

import estimator_scale as es
from estimator_scale import backends
from estimator_scale import errors
from estimator_scale.backends import tf_config
from tests.helpers.processes import PYTHON, ROOT, worker_env


def _env(cluster, task_type="worker", index=0):
  return {"TF_CONFIG": json.dumps({"cluster": cluster,
                                   "task": {"type": task_type,
                                            "index": index}})}


def test_workers_from_tf_config():
  cluster = {"worker": ["a:1", "b:1", "c:1"]}
  topology = tf_config.read_topology(backends.get("multi_worker_mirrored"),
                                     _env(cluster, index=2))
  assert (topology.num_workers, topology.worker_index,
          topology.is_chief) == (3, 2, False)
  assert tf_config.read_topology(backends.get("multi_worker_mirrored"),
                                 _env(cluster)).is_chief


def test_chief_and_ps_cluster():
  cluster = {"chief": ["a:1"], "worker": ["b:1", "c:1"], "ps": ["d:1"]}
  backend = backends.get("parameter_server")
  chief = tf_config.read_topology(backend, _env(cluster, "chief"))
  worker = tf_config.read_topology(backend, _env(cluster, "worker", 1))
  assert chief.is_chief and chief.num_workers == 3
  assert (worker.worker_index, worker.is_chief) == (2, False)
  assert not worker.synchronous


@pytest.mark.parametrize("raw,message", [
    ("{not json", "not valid JSON"),
    ('{"cluster": []}', "needs a 'cluster' dict"),
    (json.dumps({"cluster": {"worker": ["a:1"]},
                 "task": {"type": "worker", "index": 3}}),
     r"index 3 is outside the cluster.*0\.\.0"),
    (json.dumps({"cluster": {"worker": ["a:1"]},
                 "task": {"type": "ps", "index": 0}}), "not a job"),
    # A TFJob with a Master replica: TF1's chief, which TF 2 counts nowhere.
    (json.dumps({"cluster": {"master": ["a:1"], "worker": ["b:1"]},
                 "task": {"type": "worker", "index": 0}}),
     r"job\(s\) 'master'; valid jobs are chief, worker, ps, evaluator"),
])
def test_bad_tf_config(raw, message):
  with pytest.raises(errors.TopologyError, match=message):
    tf_config.read_topology(backends.get("multi_worker_mirrored"),
                            {"TF_CONFIG": raw})


def test_missing_tf_config_says_what_to_do():
  with pytest.raises(errors.TopologyError, match="estimator-scale-launch"):
    tf_config.read_tf_config({})


@pytest.mark.parametrize("backend,cluster,message", [
    ("multi_worker_mirrored", {"worker": ["a:1"], "ps": ["b:1"]},
     "use distribution=parameter_server"),
    ("parameter_server", {"worker": ["a:1"]}, "needs a 'ps' job"),
])
def test_cluster_a_backend_cannot_run(backend, cluster, message):
  with pytest.raises(errors.TopologyError, match=message):
    tf_config.read_topology(backends.get(backend), _env(cluster))


def test_topology_takes_a_backend_object():
  assert es.Topology().backend == backends.get("none")
  assert es.Topology().synchronous
  with pytest.raises(errors.TopologyError, match=r"backends\.get\(name\)"):
    es.Topology(backend="horovod")


def test_horovod_outside_horovodrun(monkeypatch):
  monkeypatch.delenv("HOROVOD_RANK", raising=False)
  with pytest.raises(errors.TopologyError, match="horovodrun -np 2"):
    es.build_run_config("horovod", model_dir="/tmp/x")


def test_tf_config_with_local_distribution_is_refused(monkeypatch):
  monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {}}))
  with pytest.raises(errors.TopologyError, match="TF_CONFIG is set"):
    es.build_run_config("none")


def test_unknown_distribution():
  with pytest.raises(errors.TopologyError, match="valid: none, mirrored"):
    es.build_run_config("nccl")


def test_multi_worker_needs_model_dir():
  with pytest.raises(ValueError, match="needs a model_dir"):
    es.build_run_config("multi_worker_mirrored")


def test_intra_op_threads_size_the_process_pools():
  """In a fresh process: the pools take the size, a later conflict raises."""
  script = (
      "import tensorflow as tf\n"
      "import estimator_scale as es\n"
      "es.build_run_config('none', intra_op_threads=1)\n"
      "tf.constant(1.0) + 1.0\n"  # starts the context with its pools
      "assert tf.config.threading.get_intra_op_parallelism_threads() == 1\n"
      "es.build_run_config('none', intra_op_threads=1)\n"
      "try:\n"
      "  es.build_run_config('none', intra_op_threads=2)\n"
      "except ValueError as e:\n"
      "  print('refused:', e)\n")
  proc = subprocess.run([PYTHON, "-c", script], cwd=ROOT, env=worker_env(),
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "refused: intra_op_threads=2" in proc.stdout
  assert "already runs with 1" in proc.stdout

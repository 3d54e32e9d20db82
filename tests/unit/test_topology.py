"""Topology from TF_CONFIG, the run-config builder's refusals, and what
--global_batch_size means on each backend."""
import json
import subprocess

from absl.testing import flagsaver
import pytest

import estimator_scale as es
from estimator_scale import backends
from estimator_scale import errors
from estimator_scale.backends import tf_config
from estimator_scale.cli import estimators
from estimator_scale.cli import evaluation
from estimator_scale.cli import flags as cli_flags
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


def _in_a_fresh_process(script):
  proc = subprocess.run([PYTHON, "-c", script], cwd=ROOT, env=worker_env(),
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc


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
  proc = _in_a_fresh_process(script)
  assert "refused: intra_op_threads=2" in proc.stdout
  assert "already runs with 1" in proc.stdout


def test_the_coordination_service_outlasts_a_busy_hosts_stall():
  """In a fresh process: the service a MultiWorkerMirroredStrategy keeps."""
  script = (
      "import json, os\n"
      "from tensorflow.python.eager import context\n"
      "from estimator_scale.backends import tf_config\n"
      "os.environ['TF_CONFIG'] = json.dumps({'cluster': {'worker': "
      "['a:1', 'b:1']}, 'task': {'type': 'worker', 'index': 1}})\n"
      "tf_config._coordinate(os.environ)\n"
      "c = context.context().coordination_service\n"
      "print(c.service_leader, c.heartbeat_timeout_in_ms,\n"
      "      [(j.name, j.num_tasks) for j in c.coordinated_job_list])\n")
  proc = _in_a_fresh_process(script)
  assert proc.stdout.split("\n")[-2] == (
      f"/job:worker/replica:0/task:0 {tf_config.HEARTBEAT_TIMEOUT_S * 1000} "
      "[('worker', 2)]")


@pytest.mark.parametrize("name,cluster", [
    ("mirrored", None),
    ("parameter_server", {"chief": ["a:1"], "worker": ["b:1"],
                          "ps": ["c:1"]})])
def test_sessions_optimize_a_graph_once_as_the_estimators_default_does(
    name, cluster, monkeypatch, tmp_path):
  """TensorFlow's default is two passes of graph optimizations: seconds
  more on each new graph of many tables."""
  if cluster:
    monkeypatch.setenv("TF_CONFIG", json.dumps(
        {"cluster": cluster, "task": {"type": "chief", "index": 0}}))
  session = es.build_run_config(
      name, model_dir=str(tmp_path)).run_config.session_config
  rewrites = session.graph_options.rewrite_options
  assert rewrites.meta_optimizer_iterations == rewrites.ONE
  assert session.allow_soft_placement


def _job(name, workers, replicas=1):
  backend = (backends.get("parameter_server").synchronized()
             if name == "ps_sync" else backends.get(name))
  return es.Topology(backend=backend, num_workers=workers,
                     replicas_per_worker=replicas)


# Each backend as it runs: one process, replicas in one, 2 workers.
_JOBS = [("none", 1, 1), ("mirrored", 1, 2), ("multi_worker_mirrored", 2, 1),
         ("horovod", 2, 1), ("ps_sync", 2, 1), ("parameter_server", 2, 1),
         ("horovod", 4, 1), ("parameter_server", 4, 1)]


@pytest.mark.parametrize("name,workers,replicas", _JOBS)
def test_global_batch_size_means_one_thing_on_every_backend(name, workers,
                                                            replicas):
  """The same flags (--global_batch_size=64 --accumulation_steps=2) on each
  backend: every replica reads 64 / (workers x replicas), so the
  micro-batch, the batch the S = 1 learning rate is for, is the same
  wherever the job has as many replicas; an asynchronous update is one
  worker's share and S counts that share's micro-batches."""
  topology = _job(name, workers, replicas)
  training = es.TrainingConfig(accumulation_steps=2)
  per_replica = topology.replica_batch_size(64, 2)
  assert per_replica * topology.num_replicas == 64
  micro_batch = per_replica // 2
  assert micro_batch == 64 // (workers * replicas * 2)
  per_update = topology.examples_per_update(64)
  assert per_update == (64 if topology.synchronous else 64 // workers)
  # An update averages S micro-batches: S = 1 is one micro-batch everywhere.
  assert per_update == training.samples_per_update(topology) * micro_batch
  assert training.resolved_scale(topology) == (
      workers * replicas * 2 if topology.synchronous else replicas * 2)


def test_asynchronous_workers_split_the_global_batch_and_say_so():
  topology = _job("parameter_server", 2)
  with pytest.raises(errors.ConfigError,
                     match=r"^global_batch_size=6 does not divide into 2 "
                     r"replica\(s\) x 2 accumulation step\(s\) = 4 \(2 "
                     r"worker\(s\) x 1 replica\(s\) each\); use a multiple "
                     r"of 4, e\.g\. 4 or 8$"):
    topology.replica_batch_size(6, 2)


def test_the_cli_path_reads_the_same_batch_arithmetic(monkeypatch, tmp_path):
  """The command line's input and throughput under asynchronous parameter
  servers: --global_batch_size=64 over 2 workers is 32 examples per worker
  and per update, as `Topology` says."""
  monkeypatch.setenv("TF_CONFIG", json.dumps({
      "cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"],
                  "ps": ["localhost:3"]},
      "task": {"type": "chief", "index": 0}}))
  if not cli_flags.FLAGS.is_parsed():
    cli_flags.FLAGS.mark_as_parsed()
  with flagsaver.flagsaver(model="digits_mlp", model_dir=str(tmp_path),
                           distribution="parameter_server",
                           global_batch_size=64, accumulation_steps=2):
    estimator = estimators.estimator(estimators.registered_model())
    train, _ = evaluation.input_fns(estimator)
    assert not estimator.topology.synchronous
    replica_batch = estimator.topology.replica_batch_size(64, 2)
    assert replica_batch == 32
    features, _ = next(iter(estimator._for_this_job(train)()))  # pylint: disable=protected-access
    assert features["image"].shape[0] == replica_batch
    estimator._hooks([], 10)  # pylint: disable=protected-access
    assert estimator.progress._batch == 32  # pylint: disable=protected-access

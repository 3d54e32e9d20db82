"""TF_CONFIG clusters: `multi_worker_mirrored` and `parameter_server`."""
import json
import os
import shutil
import tempfile
import time

from absl import logging
import numpy as np
import tensorflow as tf
from tensorflow.tsl.protobuf import coordination_config_pb2  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.distribute import multi_worker_util  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.eager import context  # pylint: disable=g-direct-tensorflow-import

from estimator_scale import embeddings
from estimator_scale import environment
from estimator_scale import errors
from estimator_scale import hooks as hooks_lib
from estimator_scale import topology as topology_lib
from estimator_scale.backends import base
from estimator_scale.backends import coordinator
from estimator_scale.backends import ps_sync
from estimator_scale.backends import reducers
from estimator_scale.backends import slurm

DEFAULT_COLLECTIVE_TIMEOUT_S = 300
"""multi_worker_mirrored in graph mode has no peer health check: without a
timeout, a worker whose peer died (or whose link went down) waits in its
collective forever. Long enough for the slowest first update (graph build,
restore); `environment.COLLECTIVE_TIMEOUT` (seconds, 0: none) changes it."""


DEFAULT_SHARED_DIR_WAIT_S = 60
"""How long a worker looks for the chief's token in model_dir: the workers
of a job start within seconds of each other, and a directory each host
has on its own disk never shows the token, however long it waits."""
TOKEN_NAME = "chief.token"


def _seconds(environ, name, default, allow_zero):
  """`environ[name]` as seconds, or a ConfigError saying what is valid."""
  raw = environ.get(name, str(default))
  try:
    seconds = float(raw)
  except ValueError:
    seconds = -1
  if seconds < 0 or (seconds == 0 and not allow_zero):
    valid = ">= 0 (0: no timeout)" if allow_zero else "> 0"
    raise errors.ConfigError(f"{name}={raw!r} is not a number of seconds "
                             f"{valid}")
  return seconds


def collective_timeout(environ):
  """The collective ops' timeout in seconds (None: wait forever)."""
  return _seconds(environ, environment.COLLECTIVE_TIMEOUT,
                  DEFAULT_COLLECTIVE_TIMEOUT_S, allow_zero=True) or None


HEARTBEAT_TIMEOUT_S = 30
"""How long the coordination service waits for a task's heartbeat before it
fails every task. TensorFlow's 10 s is shorter than the stalls a busy host
gives all its processes at once, which then fail a job that was working; 30 s
is also how long Horovod's Gloo waits for a peer."""


def _coordinate(environ):
  """The strategy's coordination service, with `HEARTBEAT_TIMEOUT_S`."""
  cluster, task_type, _ = read_tf_config(environ)
  if (task_type not in ("chief", "worker") or
      context.context().coordination_service is not None):
    return
  jobs = [coordination_config_pb2.CoordinatedJob(name=job,
                                                 num_tasks=len(cluster[job]))
          for job in ("chief", "worker") if job in cluster]
  context.context().configure_coordination_service(
      service_type="standalone",
      service_leader=multi_worker_util.coordination_leader(cluster),
      heartbeat_timeout_in_ms=HEARTBEAT_TIMEOUT_S * 1000,
      coordinated_jobs=jobs)


def _multi_worker_strategy():
  _coordinate(os.environ)
  options = tf.distribute.experimental.CommunicationOptions(
      timeout_seconds=collective_timeout(os.environ))
  return tf.distribute.MultiWorkerMirroredStrategy(
      communication_options=options)


class MultiWorkerMirrored(base.Backend):
  """Synchronous workers; gradients all-reduced by collective ops."""

  name = "multi_worker_mirrored"
  compression_refusal = base.STRATEGY_REFUSAL
  listeners_refusal = ("TF 2.15's Estimator saves through its own session "
                       "under MultiWorkerMirroredStrategy and calls none")

  def build(self, run_config_kwargs, model_dir, replicas, intra_op_threads):
    """See base class."""
    return _cluster(
        self, run_config_kwargs, model_dir, intra_op_threads,
        _multi_worker_strategy)

  def check_cluster(self, cluster):
    """Refuses a cluster this backend cannot run."""
    if "ps" in cluster:
      raise errors.TopologyError(
          "distribution=multi_worker_mirrored takes a cluster of "
          "'chief'/'worker' tasks only; TF_CONFIG has a 'ps' job "
          "(use distribution=parameter_server)")

  def _reducer(self, compression, sparse_exchange):
    """See base class."""
    del compression, sparse_exchange  # only the defaults pass the checks
    return reducers.StrategyReducer()

  def replicas_in_sync(self, topology):
    """See base class."""
    return topology.num_replicas


class ParameterServer(base.Backend):
  """Workers applying updates on the ps: async, or `ps_sync.SyncReducer`."""

  name = "parameter_server"
  tables_on_ps = True
  compression_refusal = ("workers send their gradients to the parameter "
                         "servers, not through an allreduce")
  synchronous = False

  def __init__(self):
    self._roles = None  # (workers, index, is_chief) once built

  def synchronized(self):
    """See base class."""
    self.synchronous = True
    return self

  def build(self, run_config_kwargs, model_dir, replicas, intra_op_threads):
    """See base class."""
    # Its servers keep serving between train() calls.
    scale_config = _cluster(self, run_config_kwargs, model_dir,
                            intra_op_threads, servers_persist=True,
                            own_devices_only=True)
    topology = scale_config.topology
    self._roles = (topology.num_workers, topology.worker_index,
                   topology.is_chief)
    if self.synchronous:
      logging.info(
          "parameter_server: synchronous updates (ps_sync): each update "
          "averages the gradients of all %d workers, applied once by the "
          "chief", topology.num_workers)
      waiting = ps_sync.TimeoutHook(collective_timeout(os.environ),
                                    _task_name(os.environ))
      scale_config.hooks.append(waiting)
      scale_config.coordinator.waiting = waiting
    else:
      logging.info(
          "parameter_server: asynchronous updates (the default): each worker "
          "applies its own gradients; ps_sync=True (--ps_sync) averages all "
          "workers' gradients in every update")
    return scale_config

  def check_cluster(self, cluster):
    """Refuses a cluster this backend cannot run."""
    if "ps" not in cluster:
      raise errors.TopologyError(
          "distribution=parameter_server needs a 'ps' job in TF_CONFIG's "
          f"cluster (under srun: {environment.PS_TASKS}=N makes the step's "
          "first N tasks parameter servers)")

  def _reducer(self, compression, sparse_exchange):
    """See base class."""
    del compression, sparse_exchange  # only the defaults pass the checks
    if not self.synchronous:
      return reducers.LocalReducer()
    if self._roles is None:
      raise errors.UsageError(
          "synchronous parameter servers reduce with the topology of the "
          "run config: use build_run_config(...).topology")
    return ps_sync.SyncReducer(*self._roles)


def _task_name(environ):
  """ "worker 1" of TF_CONFIG's task."""
  _, task_type, index = read_tf_config(environ)
  return f"{task_type} {index}"


def _own_devices(environ):
  """A ps task's session devices: the ps tasks and its own. A session on every
  task's devices waits for each, so a late worker would wait forever."""
  _, task_type, index = read_tf_config(environ)
  if task_type not in ("chief", "worker"):
    return []
  return ["/job:ps", f"/job:{task_type}/task:{index}"]


def _cluster(backend, run_config_kwargs, model_dir, intra_op_threads,
             make_strategy=None, servers_persist=False,
             own_devices_only=False):
  """A TF_CONFIG worker's ScaleConfig."""
  base.pin_threads(intra_op_threads or 0, requested=bool(intra_op_threads))
  base.require_model_dir(backend.name, model_dir)
  adopt_slurm_step(os.environ)
  topology = read_topology(backend)
  session_config = base.session_config(intra_op_threads or 0)
  if own_devices_only:
    session_config.device_filters.extend(_own_devices(os.environ))
  config = tf.estimator.RunConfig(
      session_config=session_config,
      model_dir=model_dir,
      train_distribute=make_strategy() if make_strategy else None,
      **run_config_kwargs)
  return base.ScaleConfig(config, topology,
                          ClusterCoordinator(topology, servers_persist))


def adopt_slurm_step(environ):
  """Writes a Slurm step task's TF_CONFIG into `environ` if it has none."""
  if not environ.get("TF_CONFIG") and slurm.in_step(environ):
    config = slurm.tf_config(environ)
    environ["TF_CONFIG"] = json.dumps(config)
    if config["task"]["type"] == "ps":
      slurm.end_with_trainers(config)


_JOBS = ("chief", "worker", "ps", "evaluator")
"""The jobs TF 2's Estimator and strategies know: a worker of another name
(TF1's "master") would be counted by none of them."""


def read_tf_config(environ=None):
  """Parses TF_CONFIG, raising an error that says what a valid one looks like."""
  environ = os.environ if environ is None else environ
  example = ('{"cluster": {"worker": ["host1:2222", "host2:2222"]}, '
             '"task": {"type": "worker", "index": 0}}')
  raw = environ.get("TF_CONFIG")
  if not raw:
    raise errors.TopologyError("this distribution needs TF_CONFIG describing the "
                        f"cluster, e.g. TF_CONFIG='{example}' (estimator-scale-launch "
                        "sets it, and srun's tasks get it from their Slurm step)")
  try:
    config = json.loads(raw)
  except json.JSONDecodeError as e:
    raise errors.TopologyError(f"TF_CONFIG is not valid JSON ({e}); expected e.g. "
                        f"{example}") from None
  cluster = config.get("cluster") if isinstance(config, dict) else None
  task = config.get("task") if isinstance(config, dict) else None
  if not isinstance(cluster, dict) or not isinstance(task, dict):
    raise errors.TopologyError("TF_CONFIG needs a 'cluster' dict and a 'task' dict, "
                        f"e.g. {example}")
  unknown = sorted(set(cluster) - set(_JOBS))
  if unknown:
    raise errors.TopologyError(
        f"TF_CONFIG's cluster has job(s) {', '.join(map(repr, unknown))}; valid "
        f"jobs are {', '.join(_JOBS)} ('master' is TF1's name for the chief: "
        "call it 'chief', e.g. a TFJob's Chief replica, not Master)")
  task_type, index = task.get("type"), task.get("index")
  if task_type not in cluster:
    raise errors.TopologyError(f"TF_CONFIG task type {task_type!r} is not a job of "
                        f"the cluster (jobs: {', '.join(sorted(cluster))})")
  if not isinstance(index, int) or not 0 <= index < len(cluster[task_type]):
    raise errors.TopologyError(
        f"TF_CONFIG task index {index!r} is outside the cluster: job "
        f"{task_type!r} has {len(cluster[task_type])} task(s), valid indices "
        f"0..{len(cluster[task_type]) - 1}")
  return cluster, task_type, index


def read_topology(backend, environ=None):
  """A TF_CONFIG worker's topology: chief, then `worker` tasks (not ps)."""
  cluster, task_type, index = read_tf_config(environ)
  backend.check_cluster(cluster)
  chiefs = len(cluster.get("chief", []))
  num_workers = chiefs + len(cluster.get("worker", []))
  if task_type in ("chief", "worker"):
    worker_index = index if task_type == "chief" else chiefs + index
  else:
    worker_index = 0
  return topology_lib.Topology(
      backend=backend, num_workers=max(num_workers, 1),
      worker_index=worker_index,
      is_chief=(task_type == "chief" or
                (chiefs == 0 and task_type == "worker" and index == 0)))


class ClusterCoordinator(coordinator.Coordinator):
  """TF_CONFIG workers: with no channel to share the chief's value, decisions
  follow from steps alone."""

  can_broadcast = False

  def __init__(self, topology, servers_persist):
    super().__init__(topology)
    self._servers_persist = servers_persist
    self._servers_started = False
    self._target = 0
    self._shared_dir_checked = False
    self.waiting = None
    """The `ps_sync.TimeoutHook` of a synchronous parameter-server task."""

  def worker_labels(self):
    """See base class: the tasks and hosts TF_CONFIG names."""
    return cluster_worker_labels(os.environ)

  def train(self, estimator, input_fn, hooks, steps, max_steps,
            listeners=()):
    """See base class."""
    if not self._shared_dir_checked:
      check_shared_model_dir(estimator.model_dir, self.topology.backend)
      self._shared_dir_checked = True
    start = coordinator.checkpoint_step(estimator.model_dir)
    target = coordinator.target_step(start, steps, max_steps,
                                     self.topology.backend)
    if start >= target:
      return coordinator.nothing_to_train(start, target)
    last = hooks_lib.LastStepHook()
    listeners = coordinator.saving_listeners(estimator, listeners)
    try:
      if self._servers_started and self._servers_persist:
        # train_and_evaluate would start this task's gRPC server again.
        estimator.train(input_fn, hooks=hooks + [last], max_steps=target,
                        saving_listeners=listeners)
      else:
        tf.estimator.train_and_evaluate(
            estimator,
            tf.estimator.TrainSpec(
                input_fn, max_steps=target, hooks=hooks + [last],
                saving_listeners=listeners),
            # Without an evaluator task the EvalSpec is not used.
            tf.estimator.EvalSpec(input_fn, steps=1))
    except tf.errors.DeadlineExceededError as e:
      if self.waiting is None:
        raise
      raise self.waiting.timeout_error() from e
    self._servers_started = True
    self._target = target
    return coordinator.result(last, estimator, target)

  def _wait_for_checkpoint(self, model_dir, timeout=300):
    target = self._target
    deadline = time.time() + timeout
    while coordinator.checkpoint_step(model_dir) < target:
      if time.time() > deadline:
        raise TimeoutError(f"no checkpoint at step {target} in {model_dir} "
                           f"after {timeout}s; is the chief alive?")
      time.sleep(0.5)

  def evaluate(self, estimator, input_fn, **kwargs):
    """The chief evaluates (on ps tasks if any); others take its metrics."""
    on_ps = estimator.config.num_ps_replicas > 0 and self._servers_started
    if self.topology.is_chief:
      if not on_ps:
        return estimator.evaluate(input_fn, **kwargs)
      _name_checkpoint(estimator, kwargs)
      metrics = self._evaluate_on_ps(estimator, input_fn, **kwargs)
      _write_metrics(estimator.eval_dir(kwargs.get("name")),
                     kwargs["checkpoint_path"], metrics)
      return metrics
    self._wait_for_checkpoint(estimator.model_dir)
    _name_checkpoint(estimator, kwargs)
    if on_ps:
      return _read_metrics(estimator.eval_dir(kwargs.get("name")),
                           kwargs["checkpoint_path"])
    scratch = tempfile.mkdtemp(prefix="eval-")
    try:
      return _twin(estimator, estimator.config.replace(
          model_dir=scratch)).evaluate(input_fn, **kwargs)
    finally:
      shutil.rmtree(scratch, ignore_errors=True)

  def _evaluate_on_ps(self, estimator, input_fn, **kwargs):
    """The chief's evaluation on the ps tasks, through its own server."""
    config = estimator.config
    twin_config = config.replace()
    # RunConfig lets nothing set it: a chief evaluates in a local session.
    twin_config._evaluation_master = config.master  # pylint: disable=protected-access
    twin = _twin(estimator, twin_config)
    logging.info("Evaluating on the %d ps tasks, where the tables are",
                 config.num_ps_replicas)
    with embeddings.reading_on_ps(*_reading_on_ps_args(config)):
      return twin.evaluate(input_fn, **kwargs)

  def predict(self, estimator, input_fn, on_ranks=False, **kwargs):
    """On the ps tasks while they serve (until every trainer is done), else
    with only this task's devices (a session on all waits for exited ones)."""
    coordinator.refuse_on_ranks(self.topology, on_ranks)
    run_config = estimator.config
    if run_config.num_ps_replicas > 0 and self._servers_started:
      logging.info("Predicting on the %d ps tasks, where the tables are",
                   run_config.num_ps_replicas)
      return embeddings.predictions_on_ps(
          estimator.predict(input_fn, **kwargs),
          *_reading_on_ps_args(run_config))
    config = tf.compat.v1.ConfigProto()
    config.CopyFrom(run_config.session_config)
    config.device_filters[:] = [_task_device(run_config)]
    twin_config = run_config.replace(session_config=config)
    if not self._servers_started:  # no server of this task to run on
      twin_config._master = ""  # pylint: disable=protected-access
    return _twin(estimator, twin_config).predict(input_fn, **kwargs)

  def export(self, estimator, export_dir_base, receiver_fn, **kwargs):
    """Only the chief exports; others return the path it will write under."""
    if self.topology.is_chief:
      return estimator.export_saved_model(export_dir_base, receiver_fn,
                                          **kwargs)
    return os.fsencode(export_dir_base)


def _task_device(run_config):
  """This task's device name, "/job:chief/task:0"."""
  return f"/job:{run_config.task_type}/task:{run_config.task_id}"


def _reading_on_ps_args(run_config):
  """`reading_on_ps`'s arguments for this task, through its own server."""
  return (run_config.num_ps_replicas, _task_device(run_config),
          run_config.master, run_config.session_config)


def _twin(estimator, config):
  """`estimator`'s model_fn and params under another RunConfig."""
  return tf.estimator.Estimator(
      lambda features, labels, mode, config: estimator.model_fn(
          features, labels, mode, config), config=config)


METRICS_WAIT_S = 3600
"""How long a parameter-server job's worker waits for the chief's metrics of
a checkpoint: an evaluation of a large eval set may take long; the launcher
or scheduler ends the job sooner when the chief fails."""


def _name_checkpoint(estimator, kwargs):
  """Fixes the checkpoint an evaluation reads before it starts."""
  if kwargs.get("checkpoint_path") is None:
    kwargs["checkpoint_path"] = tf.train.latest_checkpoint(
        estimator.model_dir)


def _metrics_path(eval_dir, checkpoint_path):
  """By the checkpoint's name: a worker's step while the chief saves leaves
  a checkpoint whose global_step is one past it."""
  step = int(checkpoint_path.rpartition("-")[2])
  return step, os.path.join(eval_dir, f"metrics-{step}.json")


def _write_metrics(eval_dir, checkpoint_path, metrics):
  """Writes the chief's `metrics` of `checkpoint_path` for the others
  atomically (aside, renamed)."""
  _, path = _metrics_path(eval_dir, checkpoint_path)
  tf.io.gfile.makedirs(eval_dir)
  with tf.io.gfile.GFile(path + ".tmp", "w") as f:
    json.dump({k: np.asarray(v).tolist() for k, v in metrics.items()}, f)
  tf.io.gfile.rename(path + ".tmp", path, overwrite=True)


def _read_metrics(eval_dir, checkpoint_path, wait_s=METRICS_WAIT_S):
  """The chief's metrics of `checkpoint_path`, once it has written them."""
  step, path = _metrics_path(eval_dir, checkpoint_path)
  deadline = time.time() + wait_s
  while not tf.io.gfile.exists(path):
    if time.time() > deadline:
      raise TimeoutError(f"no metrics of step {step} from the chief in "
                         f"{path} after {wait_s}s; is the chief alive?")
    time.sleep(0.5)
  logging.info("metrics of step %d: the chief's, from %s", step, path)
  with tf.io.gfile.GFile(path) as f:
    return json.load(f)


def cluster_worker_labels(environ):
  """"chief 0 (host)", "worker 0 (host)", ...: the chief first."""
  cluster, _, _ = read_tf_config(environ)
  return [f"{task_type} {index} ({address.rpartition(':')[0] or address})"
          for task_type in ("chief", "worker")
          for index, address in enumerate(cluster.get(task_type, []))]


def shared_dir_wait(environ):
  """Seconds a worker waits for the chief's token
  (`environment.SHARED_DIR_WAIT`)."""
  return _seconds(environ, environment.SHARED_DIR_WAIT,
                  DEFAULT_SHARED_DIR_WAIT_S, allow_zero=False)


def _read_token(path):
  try:
    with tf.io.gfile.GFile(path) as f:
      return json.loads(f.read())
  except (tf.errors.NotFoundError, ValueError):
    return None  # not there yet, or seen half-written


def check_shared_model_dir(model_dir, backend, environ=None):
  """Fails unless this task's model_dir is the chief's: workers on their own
  directories would diverge or hang silently."""
  environ = os.environ if environ is None else environ
  cluster, task_type, index = read_tf_config(environ)
  if task_type not in ("chief", "worker"):
    return  # parameter servers and evaluators train nothing here
  path = os.path.join(model_dir, TOKEN_NAME)
  topology = read_topology(backend, environ)
  if topology.is_chief:
    tf.io.gfile.makedirs(model_dir)
    with tf.io.gfile.GFile(path, "w") as f:
      f.write(json.dumps({"cluster": cluster}))
    return
  wait = shared_dir_wait(environ)
  deadline = time.monotonic() + wait
  while True:
    token = _read_token(path)
    if token is not None and token.get("cluster") == cluster:
      return
    if time.monotonic() > deadline:
      raise errors.ConfigError(
          f"model_dir={model_dir}: {task_type} {index} sees no token from "
          f"this job's chief there after {wait:g} s, so the workers do not "
          f"share this directory (each host's own disk?); {backend.name} "
          "needs one model_dir for all its workers: a shared file system, "
          "or object storage (s3://, gs://). If the chief starts later, "
          f"raise {environment.SHARED_DIR_WAIT}")
    time.sleep(0.5)

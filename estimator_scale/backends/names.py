"""The one list of distribution backends, readable without TensorFlow;
backend modules are imported on first use."""
import importlib

from estimator_scale import errors

_MODULES = {
    "none": ("estimator_scale.backends.local", "Local"),
    "mirrored": ("estimator_scale.backends.mirrored", "Mirrored"),
    "multi_worker_mirrored": ("estimator_scale.backends.tf_config",
                              "MultiWorkerMirrored"),
    "parameter_server": ("estimator_scale.backends.tf_config",
                         "ParameterServer"),
    "horovod": ("estimator_scale.backends.horovod", "Horovod"),
}

NAMES = tuple(_MODULES)
"""Valid `distribution` values."""

COMPRESSIONS = ("none", "fp16")
"""`allreduce_compression` values some backend carries out; each backend
says which of them it offers (`Backend.compressions`)."""

SPARSE_EXCHANGES = ("auto", "sparse", "dense")
"""`sparse_exchange` values: how sparse (embedding) gradients travel between
workers. "auto" is every backend's own choice; Horovod's reducer also takes
"sparse" (allgather the rows touched) and "dense" (allreduce the table, as
Horovod's sparse_as_dense); each backend says which it offers
(`Backend.sparse_exchanges`)."""

ELASTIC_BATCH_POLICIES = ("scale", "hold")
"""How an elastic Horovod job's batch meets a new size: `scale` keeps each
rank's micro-batch and accumulation steps, so the global batch and S follow
the size (AdaScale's gain follows S: the paper's elastic setting); `hold`
keeps the global batch and S by changing the accumulation steps."""

COMMIT_EVERY_N_STEPS = 100
"""An elastic Horovod job's default updates between commits."""


def get(name):
  """A new Backend for `name` (it may hold per-job state), or a
  TopologyError listing the valid ones."""
  if name not in _MODULES:
    raise errors.TopologyError(
        f"distribution={name!r} is unknown; valid: {', '.join(NAMES)}")
  module, cls = _MODULES[name]
  return getattr(importlib.import_module(module), cls)()

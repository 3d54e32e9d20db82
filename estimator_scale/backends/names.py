"""Each distribution's backend, its module imported on first use; the names
are `choices.DISTRIBUTIONS`."""
import importlib

from estimator_scale import choices
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


def get(name):
  """A new Backend for `name` (it may hold per-job state), or a
  TopologyError listing the valid ones."""
  if name not in _MODULES:
    raise errors.TopologyError(
        f"distribution={name!r} is unknown; valid: "
        f"{', '.join(choices.DISTRIBUTIONS)}")
  module, cls = _MODULES[name]
  return getattr(importlib.import_module(module), cls)()

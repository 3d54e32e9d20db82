"""One object per distribution backend: its RunConfig, Topology,
coordinator and reducer. `get(name)` is the only place a name is mapped."""
from estimator_scale import topology as topology_lib
from estimator_scale.backends import cluster
from estimator_scale.backends import horovod
from estimator_scale.backends import local
from estimator_scale.backends import mirrored

_BACKENDS = {b.name: b for b in (
    local.Local(), mirrored.Mirrored(), cluster.MultiWorkerMirrored(),
    cluster.ParameterServer(), horovod.Horovod())}
assert tuple(_BACKENDS) == topology_lib.BACKENDS


def get(name):
  """The backend called `name`, or a TopologyError listing the valid ones."""
  if name not in _BACKENDS:
    raise topology_lib.TopologyError(
        f"distribution={name!r} is unknown; valid: "
        f"{', '.join(topology_lib.BACKENDS)}")
  return _BACKENDS[name]

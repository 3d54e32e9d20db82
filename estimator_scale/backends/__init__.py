"""Distribution backends: the only package where a backend's name means
something. `names.get(name)` makes one; everything else holds the Backend
object (`Topology.backend`) and asks it."""
from estimator_scale.backends.names import COMPRESSIONS
from estimator_scale.backends.names import NAMES
from estimator_scale.backends.names import SPARSE_EXCHANGES
from estimator_scale.backends.names import get

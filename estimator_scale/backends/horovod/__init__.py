"""Horovod: everything the framework does for Horovod ranks (primitives in
ranks.py)."""
from estimator_scale.backends.horovod.backend import Horovod
from estimator_scale.backends.horovod.ranks import import_horovod
from estimator_scale.backends.horovod.ranks import launched

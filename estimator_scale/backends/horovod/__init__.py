"""Horovod: everything the framework does for Horovod ranks, in one place.

ranks.py holds the rank primitives (launched by horovodrun, init, this
rank's topology and cores) that the others import; backend.py makes a
rank's RunConfig; binding.py sets Horovod's knobs and binds ranks to cores;
reducer.py allreduces each update; coordinator.py agrees on start, stop,
evaluation and export; stop.py turns a SIGTERM on any rank into the same
stop on all of them; faults.py ends a rank whose launcher is gone and names
the rank and host a failed job lost; elastic.py carries a job under
horovodrun's elastic driver through hosts that join, leave or fail.
"""
from estimator_scale.backends.horovod.backend import Horovod
from estimator_scale.backends.horovod.ranks import import_horovod
from estimator_scale.backends.horovod.ranks import launched

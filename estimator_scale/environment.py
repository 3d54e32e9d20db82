"""Every environment variable the framework reads (docs/environment.md):
settings that must reach every task of a job, or a process that parses no
flags. Each reader keeps the default and parsing beside the code it changes."""

PREFIX = "ESTIMATOR_SCALE_"
"""Every name below starts with it: the launcher forwards each variable with
it to remote tasks, so a setting reaches every task of a job."""

PS_TASKS = "ESTIMATOR_SCALE_PS_TASKS"
"""How many of a Slurm step's tasks are parameter servers: the first ones,
so the chief is the task after them (distribution=parameter_server only).
Default 0: srun starts its tasks alike, so only this says which serve."""

PORT = "ESTIMATOR_SCALE_PORT"
"""First port on each node of a Slurm step: a node's tasks listen on it and
the ones after it, in the order of their local index; Horovod's rendezvous
(on the first task's node) uses it too. Default 2222, the port TensorFlow's
distributed examples use."""

CORE_BINDING = "ESTIMATOR_SCALE_CORE_BINDING"
"""`cores` (the default) binds each Horovod rank to its share of the host's
cores, as mpirun --bind-to does; `none` leaves placement to the OS (a host
shared with other jobs)."""

COLLECTIVE_TIMEOUT = "ESTIMATOR_SCALE_COLLECTIVE_TIMEOUT"
"""Seconds a multi_worker_mirrored collective or a synchronous ps update
waits for its peers before the task fails naming them; 0: forever. Default
300, long enough for the slowest first update (graph build, restore)."""

SHARED_DIR_WAIT = "ESTIMATOR_SCALE_SHARED_DIR_WAIT"
"""Seconds a TF_CONFIG worker looks for the chief's token in model_dir
before refusing a directory it does not share. Default 60: a job's tasks
start within seconds of each other."""

LISTENER = "ESTIMATOR_SCALE_LISTENER"
"""A module whose `begins(moment)` each process calls as a checkpoint's
save, a table merge or a reshard begins (estimator_scale.moments): how a
tool such as the chaos driver acts at them. Unset by default: none."""

TASK_MEMORY = "ESTIMATOR_SCALE_TASK_MEMORY_BYTES"
"""Bytes one task may hold in variables, checked before the first step.
Default: the task's memory cgroup limit if below the host's memory, else
the host's memory; set it where tasks share a host."""

MIN_SLICE = "ESTIMATOR_SCALE_MIN_SLICE_BYTES"
"""Bytes up to which a variable stays whole under parameter servers.
Default 64 MiB: splitting small variables only adds requests."""

MAX_PART = "ESTIMATOR_SCALE_MAX_PART_BYTES"
"""Bytes a part of a split variable, and a group of a ps task's variables
in a checkpoint save, may have. Default 8 MiB: a task's transient copies
are of one part."""

KERNELS = "ESTIMATOR_SCALE_KERNELS"
"""Directory of the dynamic tables' built kernel. Default
`share/estimator_scale` under sys.prefix (the virtual environment); set it
where that is not writable."""

DATA = "ESTIMATOR_SCALE_DATA"
"""Directory of the zoo's data sets. Default: ~/.cache/estimator_scale for
the real ones (they outlive a reboot), `estimator_scale_data` in the temp
dir for the generated ones."""

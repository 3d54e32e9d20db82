"""Every option's choices, readable without TensorFlow (for --help)."""
from estimator_scale import errors


def require(argument, value, valid):
  """Raises ConfigError naming `argument` unless `value` is one of `valid`."""
  if value not in valid:
    raise errors.ConfigError(f"{argument}={value!r} is unknown; valid: "
                             f"{', '.join(valid)}")


OPTIMIZERS = ("sgd", "momentum", "adam", "lazy_adam", "adamw", "lars", "lamb",
              "adagrad", "ftrl")
"""Valid `optimizer` values, the keys of `optimizers.OPTIMIZERS` (each
optimizer's factory lives with its TensorFlow code; a test keeps the two
equal)."""

SCHEDULES = ("constant", "piecewise", "cosine", "polynomial")
"""Valid `lr_schedule` values."""

LR_SCALING_RULES = ("identity", "linear", "sqrt", "adascale", "cowclip")
"""Valid `lr_scaling` values."""

ADASCALE_PARTS = ("all", "embeddings,dense")
"""Valid `adascale_parts` values: one AdaScale gain for every variable, or
one for the embedding tables and one for the dense variables."""

PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
"""Valid `precision` values."""

DISTRIBUTIONS = ("none", "mirrored", "multi_worker_mirrored",
                 "parameter_server", "horovod")
"""Valid `distribution` values: the backends (`backends.get`)."""

COMPRESSIONS = ("none", "fp16")
"""`allreduce_compression` values some backend carries out; each backend
says which of them it offers (`Backend.compressions`)."""

SPARSE_EXCHANGES = ("auto", "sparse", "dense")
"""`sparse_exchange` values: "auto" (the backend's own), "sparse" (allgather
the rows touched), "dense" (allreduce the table); `Backend.sparse_exchanges`
says which a backend offers."""

ELASTIC_BATCH_POLICIES = ("scale", "hold")
"""An elastic job's batch at a new size: `scale` keeps each rank's batch (S
follows the size), `hold` keeps the global batch and S."""

COMMIT_EVERY_N_STEPS = 100
"""An elastic Horovod job's default updates between commits."""

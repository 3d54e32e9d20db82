"""Every option's choices, readable without TensorFlow (for --help)."""

OPTIMIZERS = ("sgd", "momentum", "adam", "adamw", "lars", "lamb", "adagrad",
              "ftrl")
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

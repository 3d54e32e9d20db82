"""The training options' choices, readable without TensorFlow (for --help)."""

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

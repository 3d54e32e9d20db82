"""How a loss becomes a train_op: optimizers, schedules, scaling rules,
accumulation, AdaScale and cross-worker reduction."""

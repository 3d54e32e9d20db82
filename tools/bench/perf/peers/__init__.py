"""Hand-written peers that tools/bench/perf measures the framework against.

Each module is what a competent TensorFlow Estimator user writes without
estimator_scale, kept to the usual shape and not slowed down on purpose: a
ratio against a weakened peer would flatter the framework and mean nothing.
"""

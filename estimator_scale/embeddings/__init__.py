"""Large tables: split over parameter servers, and refused where they
cannot fit.

`place_variables` wraps any Estimator model_fn (a BaseModel's, a
hand-written one, a canned estimator's): under parameter servers it builds
the model with every large variable partitioned over the ps tasks and logs
the bytes each task holds; in training it refuses, before the first step,
a job whose variables do not fit where its backend puts them.
"""
import os

from estimator_scale.embeddings import capacity
from estimator_scale.embeddings import partitioning

MIN_SLICE = "ESTIMATOR_SCALE_MIN_SLICE_BYTES"
"""Bytes up to which a variable stays whole under parameter servers
(default `partitioning.MIN_SLICE_BYTES`)."""


def min_slice_bytes(environ=None):
  """`MIN_SLICE`'s value, or the default; ConfigError when not bytes > 0."""
  return capacity.bytes_setting(os.environ if environ is None else environ,
                                MIN_SLICE, partitioning.MIN_SLICE_BYTES)


def place_variables(model_fn, num_ps, topology):
  """`model_fn` with its variables placed as the job's backend needs.

  Args:
    model_fn: model_fn(features, labels, mode, config), as
      `tf.estimator.Estimator.model_fn` gives it.
    num_ps: the job's ps tasks (the RunConfig's `num_ps_replicas`); 0 or 1
      leaves every variable whole.
    topology: this process's Topology (its backend and whether it is the
      chief, which logs the capacity line).

  Returns:
    model_fn(features, labels, mode, params, config); `params` is there for
    the Estimator to keep showing them, `model_fn` has its own bound.
  """
  slice_bytes = min_slice_bytes()

  def placed(features, labels, mode, params, config):
    del params  # bound in model_fn
    if num_ps > 1:
      with partitioning.partitioned_variables(num_ps, slice_bytes):
        spec = model_fn(features, labels, mode, config)
    else:
      spec = model_fn(features, labels, mode, config)
    if mode == "train":  # the line only where tables are split
      capacity.log_and_check(topology.backend.name,
                             topology.is_chief and num_ps > 1)
    return spec
  return placed

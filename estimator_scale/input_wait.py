"""How long each update waited for its input, per worker.

Measured against a reference iterator whose element is always ready, since
even a ready element costs a thread hop. Asynchronous workers and canned
train ops exchange none.
"""
import statistics

import tensorflow as tf

from estimator_scale import data_options

COLLECTION = "estimator_scale_input_wait_seconds"
"""Graph collection holding the update's input wait seconds per worker."""

SUMMARY_PREFIX = "input_wait_seconds_per_update"
"""TensorBoard tag prefix; one scalar per worker, `<prefix>/worker_<i>`."""

NOT_MEASURED = "the train op is not build_train_op's"
"""Why a job has no figures (a canned estimator, a train op of its own)."""

WORKERS_NAMED = 8
"""Workers a progress line gives one by one; past that, median and highest."""

INPUT_SHARE_OF_EXCESS = 0.5
"""A slow worker is slow because of its input when its extra wait over the
median worker's is at least this part of its extra compute time."""


def measure(features, labels):
  """Seconds this run waited for `features` and `labels` beyond a ready
  element's cost, and the two made to follow that measure.

  The network waits for both stamps, or a slow forward pass on the stamping
  thread would read as slow input.

  Args:
    features, labels: the model_fn's arguments (labels may be None).

  Returns:
    (float32 seconds, features, labels), the last two to build on.
  """
  with tf.device("/cpu:0"), tf.name_scope("input_wait"):
    always_ready = data_options.without_tuning_thread(
        tf.data.Dataset.from_tensors(0).repeat())
    reference = tf.compat.v1.data.make_one_shot_iterator(
        always_ready).get_next()
    with tf.control_dependencies([reference]):
      reference_arrived = tf.timestamp()
    arrived = [tensor for tensor in tf.nest.flatten((features, labels),
                                                    expand_composites=True)
               if tensor is not None]
    with tf.control_dependencies(arrived):
      batch_arrived = tf.timestamp()
    wait = tf.cast(batch_arrived - reference_arrived, tf.float32)
  with tf.control_dependencies([batch_arrived, reference_arrived]):
    features, labels = tf.nest.map_structure(
        lambda tensor: None if tensor is None else tf.identity(tensor),
        (features, labels))
  return wait, features, labels


def exchange(wait, reducer, topology):
  """Every worker's `wait`, on every worker the backend tells.

  Args:
    wait: `measure()` of this update.
    reducer, topology: the backend's reducer, this process's Topology.

  Returns:
    A function to call once the update's exchange is built, returning a
    float32 vector in worker order; also added to `COLLECTION`.
  """
  return each_worker_into(COLLECTION, wait, reducer, topology)


def each_worker_into(collection, value, reducer, topology):
  """`reducer.each_worker` of `value`, deferred, also added to `collection`
  for the progress hooks."""
  shared = reducer.each_worker(value, topology.replicas_per_worker)

  def every():
    vector = shared()
    tf.compat.v1.add_to_collection(collection, vector)
    return vector
  return every


def summaries(seconds, topology):
  """One TensorBoard scalar per worker whose wait `seconds` holds."""
  if seconds.shape[0] == topology.num_workers:
    indices = range(topology.num_workers)
  else:  # asynchronous workers: this one's own
    indices = [topology.worker_index]
  for position, index in enumerate(indices):
    tf.compat.v1.summary.scalar(f"{SUMMARY_PREFIX}/worker_{index}",
                                seconds[position])


def shares(wait_seconds, wall_seconds):
  """Each worker's share of the wall time spent waiting, capped at 1.

  Args:
    wait_seconds: each worker's summed waits over some updates.
    wall_seconds: those updates' wall time, > 0.
  """
  return [min(max(seconds / wall_seconds, 0.0), 1.0)
          for seconds in wait_seconds]


def progress_text(worker_shares, num_workers):
  """The progress line's part: every worker's share, or why there is none.

  Args:
    worker_shares: `shares()` in worker order, or None where not measured.
    num_workers: workers in the job.
  """
  if worker_shares is None:
    return f"input wait not measured ({NOT_MEASURED})"
  if len(worker_shares) == 1:
    own = "" if num_workers == 1 else (
        " (the chief's own; asynchronous workers exchange none)")
    return f"input wait {worker_shares[0]:.0%}{own}"
  if len(worker_shares) <= WORKERS_NAMED:
    return "input wait per worker " + " ".join(
        f"{share:.0%}" for share in worker_shares)
  highest = max(range(len(worker_shares)), key=lambda i: worker_shares[i])
  return (f"input wait per worker median "
          f"{statistics.median(worker_shares):.0%}, highest "
          f"{worker_shares[highest]:.0%} (worker {highest})")


def slowed_by_input(worker, compute_seconds, wait_seconds):
  """Whether `worker`'s extra input wait covers its extra compute over the
  median (compute time includes the wait).

  Args:
    worker: the worker's index.
    compute_seconds, wait_seconds: each worker's seconds per update.
  """
  extra = compute_seconds[worker] - statistics.median(compute_seconds)
  extra_wait = wait_seconds[worker] - statistics.median(wait_seconds)
  return extra > 0 and extra_wait >= INPUT_SHARE_OF_EXCESS * extra


def summary(worker_shares, worker_indices):
  """The run summary's `input_wait` entry (JSON-ready).

  Args:
    worker_shares: shares over the whole run, or None where not measured.
    worker_indices: the workers they are of, in order.
  """
  if worker_shares is None:
    return {"share": None, "why": NOT_MEASURED}
  return {"share": [round(share, 4) for share in worker_shares],
          "workers": list(worker_indices)}

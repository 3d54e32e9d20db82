"""The slow host named: each worker's own compute time per update, compared.

Timed from the run's start to its gradients, so a worker waiting in the
exchange for a slow one does not look slow. Asynchronous workers are not
compared.
"""
import statistics
import time

from absl import logging
import tensorflow as tf

from estimator_scale import errors
from estimator_scale import input_wait

SLOW_FACTOR = 1.25
"""A worker slower than this times the median is named."""

COLLECTION = "estimator_scale_compute_seconds"
"""Graph collection holding each worker's compute seconds of the update."""

SUMMARY_PREFIX = "compute_seconds_per_update"
"""TensorBoard tag prefix; one scalar per worker, `<prefix>/worker_<i>`."""


def applies(topology):
  """Whether workers of `topology` are compared: several, in sync."""
  return topology.num_workers > 1 and topology.synchronous


def start_timing(features):
  """The update's start, and `features` made to wait for it (an op without
  inputs may otherwise run after the network)."""
  start = tf.timestamp()
  with tf.control_dependencies([start]):
    return start, tf.nest.map_structure(tf.identity, features)


def exchange(start, grads, loss, reducer, topology):
  """Every worker's compute seconds of this update, on every worker.

  Args:
    start: `start_timing()` of this update.
    grads, loss: this replica's, ready before the exchange.
    reducer, topology: the backend's reducer, this process's Topology.

  Returns:
    A function to call once the update's exchange is built, returning a
    float32 vector of seconds in worker order; also added to `COLLECTION`.
  """
  ready = [loss] + [g.values if isinstance(g, tf.IndexedSlices) else g
                    for g in grads if g is not None]
  with tf.control_dependencies(ready):
    end = tf.timestamp()
  own = tf.cast(end - start, tf.float32)
  return input_wait.each_worker_into(COLLECTION, own, reducer, topology)


def summaries(seconds, num_workers):
  """One TensorBoard scalar per worker of the exchanged `seconds`."""
  for index in range(num_workers):
    tf.compat.v1.summary.scalar(f"{SUMMARY_PREFIX}/worker_{index}",
                                seconds[index])


def slow_workers(seconds, factor=SLOW_FACTOR):
  """Indices, slowest first, of workers above `factor` (> 1) times the median.

  Args:
    seconds: one non-negative figure per worker.
    factor: how far above the median a worker must be.
  """
  if factor <= 1:
    raise errors.ConfigError(f"factor must be > 1, got {factor}")
  if len(seconds) < 2:
    return []
  median = statistics.median(seconds)
  if median <= 0:  # nothing measured: no basis to name anyone
    return []
  slow = [i for i, s in enumerate(seconds) if s > factor * median]
  return sorted(slow, key=lambda i: -seconds[i])


def report(seconds, workers, first_step, last_step, factor=SLOW_FACTOR,
           waits=None, update_seconds=None):
  """The chief's line about the updates `first_step`..`last_step`.

  Args:
    seconds: each worker's mean compute seconds per update.
    workers: each worker's name with its host, e.g. "rank 1 (host-b)".
    first_step, last_step: the updates the means cover.
    factor: see `slow_workers`.
    waits: each worker's mean input wait per update, or None.
    update_seconds: mean wall seconds of an update (> 0), with `waits`.
  """
  if len(seconds) != len(workers):
    raise ValueError(f"{len(seconds)} figures for {len(workers)} workers; "
                     "pass one name per worker")
  median = statistics.median(seconds)
  figures = ", ".join(f"{name} {s * 1e3:.1f} ms"
                      for name, s in zip(workers, seconds))
  line = (f"compute per update, steps {first_step}-{last_step}: {figures}; "
          f"median {median * 1e3:.1f} ms")
  slow = slow_workers(seconds, factor)
  if not slow:
    return line + f"; none above {factor:g}x the median"
  named = ", ".join(f"{workers[i]} at {seconds[i] / median:.2f}x"
                    + _cause(i, seconds, waits, update_seconds)
                    for i in slow)
  return line + f"; slow (above {factor:g}x the median): {named}"


def _cause(worker, seconds, waits, update_seconds):
  """Whether a slow worker's input is why, in the words of `report`."""
  if waits is None:
    return ""
  if len(waits) != len(seconds):
    raise ValueError(f"{len(waits)} input waits for {len(seconds)} workers; "
                     "pass one per worker")
  if not update_seconds or update_seconds <= 0:
    raise ValueError(f"update_seconds must be > 0 with waits, got "
                     f"{update_seconds}")
  share, others = input_wait.shares(
      [waits[worker],
       statistics.median(list(waits[:worker]) + list(waits[worker + 1:]))],
      update_seconds)
  if input_wait.slowed_by_input(worker, seconds, waits):
    return (f", slow because of its input (input wait {share:.0%} of the "
            f"update, the others' {others:.0%})")
  return f" (not its input: input wait {share:.0%})"


class StragglerHook(tf.compat.v1.train.SessionRunHook):
  """The chief's straggler lines, every `every_n_steps` updates and at the end;
  a session's first update (warm-up) is left out.

  Args:
    workers: each worker's name with its host, in worker order.
    every_n_steps: updates between lines.
    factor: see `slow_workers`.
  """

  def __init__(self, workers, every_n_steps=100, factor=SLOW_FACTOR):
    if every_n_steps < 1:
      raise errors.ConfigError(
          f"every_n_steps must be >= 1, got {every_n_steps}")
    slow_workers([], factor)  # checks the factor
    self._workers = list(workers)
    self._every = every_n_steps
    self._factor = factor
    self.lines = []
    """Every line logged, for callers that summarise the run."""

  def begin(self):
    found = tf.compat.v1.get_collection(COLLECTION)
    self._seconds = found[0] if found else None
    waits = tf.compat.v1.get_collection(input_wait.COLLECTION)
    self._waits = waits[0] if waits and found else None
    self._global_step = tf.compat.v1.train.get_global_step()
    self._window = self._total = None

  def after_create_session(self, session, coord):
    # Counted here, not fetched per run: a global_step fetched beside the
    # update may be read before or after its increment.
    self._step = int(session.run(self._global_step))
    self._warm = False

  def before_run(self, run_context):
    if self._seconds is None:
      return None
    return tf.compat.v1.train.SessionRunArgs(
        {"seconds": self._seconds, "waits": self._waits}
        if self._waits is not None else {"seconds": self._seconds})

  def after_run(self, run_context, run_values):
    if self._seconds is None:
      return
    self._step += 1
    step = self._step
    now = time.time()
    if not self._warm:
      self._warm = True
      self._since = now
      return
    results = run_values.results
    seconds = [float(s) for s in results["seconds"]]
    waits = ([float(s) for s in results["waits"]] if "waits" in results
             else None)
    self._window = _added(self._window, seconds, step, waits,
                          now - self._since)
    self._total = _added(self._total, seconds, step, waits, now - self._since)
    self._since = now
    if self._window["updates"] >= self._every:
      self._log(self._window)
      self._window = None

  def end(self, session):
    if self._total is not None:  # the whole run, however it ended
      self._log(self._total)

  def _log(self, sums):
    updates = sums["updates"]
    means = [s / updates for s in sums["seconds"]]
    waits = None
    if sums["waits"] is not None:
      waits = [s / updates for s in sums["waits"]]
    line = report(means, self._workers, sums["first_step"],
                  sums["last_step"], self._factor, waits,
                  max(sums["wall"] / updates, 1e-9))
    self.lines.append(line)
    logging.info("stragglers: %s", line)


def _added(sums, seconds, step, waits=None, wall=0.0):
  """`sums` (None: empty) with one more update's `seconds` at `step`, its
  workers' input `waits` (None: not measured) and its `wall` seconds."""
  if sums is None:
    return {"seconds": list(seconds), "updates": 1, "first_step": step,
            "last_step": step, "waits": None if waits is None else
            list(waits), "wall": wall}
  if len(seconds) != len(sums["seconds"]):
    raise ValueError(f"the update at step {step} has {len(seconds)} "
                     f"workers' figures, earlier ones {len(sums['seconds'])}")
  return {"seconds": [a + b for a, b in zip(sums["seconds"], seconds)],
          "updates": sums["updates"] + 1, "first_step": sums["first_step"],
          "last_step": step, "wall": sums["wall"] + wall,
          "waits": None if waits is None or sums["waits"] is None else
                   [a + b for a, b in zip(sums["waits"], waits)]}

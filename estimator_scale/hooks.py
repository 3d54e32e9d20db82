"""Session hooks: progress lines, AdaScale's stop at tau, and run bookkeeping."""
import time

from absl import logging
import tensorflow as tf

from estimator_scale import errors
from estimator_scale import input_wait
from estimator_scale.embeddings import dynamic
from estimator_scale.train_ops import adascale

_TABLES_NAMED = 4
"""Dynamic tables a progress line names one by one; more are summed."""


def _variable(name):
  matches = [v for v in tf.compat.v1.global_variables() if v.op.name == name]
  return matches[0] if matches else None


class ProgressHook(tf.compat.v1.train.SessionRunHook):
  """Logs step, loss, examples/sec, input wait shares, ETA (and AdaScale's).

  Args:
    global_batch_size: examples per update.
    every_n_steps: how often to log.
    last_step: the step training stops at, for the ETA (None: no ETA).
    topology: the job's Topology (None: one process).
  """

  def __init__(self, global_batch_size, every_n_steps=100, last_step=None,
               topology=None):
    self._batch = global_batch_size
    self._every = max(1, every_n_steps)
    self._last_step = last_step
    self._num_workers = topology.num_workers if topology else 1
    self._worker_index = topology.worker_index if topology else 0
    self.examples_per_sec = None
    """Throughput over the whole run after its first update (no warm-up)."""
    self.input_wait = None
    """Each worker's share of the run after its first update spent waiting
    for input (`input_wait.shares`), or None where it was not measured."""
    self.tables = None
    """{table: {"rows", "evicted", "admitted"}} of this session's dynamic
    tables at its end (this process's part): rows in use then, rows freed
    and ids given a row during the session; None without dynamic tables."""

  def begin(self):
    self._step = tf.compat.v1.train.get_global_step()
    self._loss = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.LOSSES)
    fetches = {"step": self._step}
    if self._loss:
      fetches["loss"] = self._loss[0]
    for name, variable in (("gain", adascale.GAIN),
                           ("progress", adascale.PROGRESS),
                           ("nonfinite_updates", adascale.NONFINITE_UPDATES)):
      var = _variable(variable)
      if var is not None:
        fetches[name] = var.read_value()
    waits = tf.compat.v1.get_collection(input_wait.COLLECTION)
    if waits:
      fetches["input_wait"] = waits[0]
    self._fetches = fetches
    # Each dynamic table's rows, fetched only for a run that logs.
    self._tables = dynamic.training_usage()
    self._mark = None
    self._window_wait = self._total_wait = None
    self._nonfinite = 0
    self._previous = None

  def after_create_session(self, session, coord):
    del coord
    self._rows_at_start = (session.run({n: u["rows"] for n, u in
                                        self._tables.items()})
                           if self._tables else None)

  def end(self, session):
    if not self._tables:
      return
    usage = session.run(self._tables)
    self.tables = {name: {"rows": int(u["rows"]), "evicted": int(u["evicted"]),
                          "admitted": int(u["rows"] - self._rows_at_start[name]
                                          + u["evicted"])}
                   for name, u in usage.items()}

  def before_run(self, run_context):
    fetches = self._fetches
    if (self._tables and self._mark is not None and self._previous is not None
        and self._previous + 1 - self._mark[0] >= self._every):
      fetches = dict(fetches, tables=self._tables)
    return tf.compat.v1.train.SessionRunArgs(fetches)

  def after_run(self, run_context, run_values):
    values = run_values.results
    step = self._previous = int(values["step"])
    if values.get("nonfinite_updates", 0) > self._nonfinite:
      self._nonfinite = int(values["nonfinite_updates"])
      logging.warning("step %d: non-finite gradients; AdaScale skipped the "
                      "update and kept its estimates and tau (%d so far)",
                      step, self._nonfinite)
    now = time.time()
    if self._mark is None:
      self._mark = self._first = (step, now)
      return
    if "input_wait" in values:
      self._window_wait = _added(self._window_wait, values["input_wait"])
      self._total_wait = _added(self._total_wait, values["input_wait"])
      self.input_wait = input_wait.shares(self._total_wait,
                                          max(now - self._first[1], 1e-9))
    if step > self._first[0]:
      self.examples_per_sec = self._batch * (step - self._first[0]) / max(
          now - self._first[1], 1e-9)
    if step - self._mark[0] < self._every:
      return
    updates_per_sec = (step - self._mark[0]) / max(now - self._mark[1], 1e-9)
    parts = [f"step {step}"]
    if "loss" in values:
      parts.append(f"loss {values['loss']:.4f}")
    parts.append(f"{updates_per_sec * self._batch:.1f} examples/sec")
    window_shares = None
    if self._window_wait is not None:
      window_shares = input_wait.shares(self._window_wait,
                                        max(now - self._mark[1], 1e-9))
    parts.append(input_wait.progress_text(window_shares, self._num_workers))
    if "gain" in values:
      parts.append(f"gain {values['gain']:.3f} tau {values['progress']:.1f}")
    if self._last_step:
      eta = (self._last_step - step) / max(updates_per_sec, 1e-9)
      parts.append(f"ETA {eta:.0f}s")
    tables = values.get("tables", {})
    if len(tables) > _TABLES_NAMED:  # a line per table would be too long
      tables = {f"{len(tables)} dynamic tables": {
          key: sum(usage[key] for usage in tables.values())
          for key in ("rows", "evicted")}}
    for name, usage in tables.items():
      parts.append(f"{name}: {usage['rows']} rows in use, "
                   f"{usage['evicted']} evicted")
    logging.info("progress: %s", ", ".join(parts))
    self._mark = (step, now)
    self._window_wait = None

  def input_wait_summary(self):
    """The run summary's `input_wait` entry, or why there is none."""
    if self.input_wait is None:
      return input_wait.summary(None, [])
    exchanged = len(self.input_wait) == self._num_workers
    return input_wait.summary(
        self.input_wait,
        range(self._num_workers) if exchanged else [self._worker_index])


def _added(sums, seconds):
  """`sums` (None: none yet) plus one update's `seconds`, entry by entry."""
  seconds = [float(s) for s in seconds]
  return seconds if sums is None else [a + b for a, b in zip(sums, seconds)]


class StopAtProgressHook(tf.compat.v1.train.SessionRunHook):
  """Stops once AdaScale's tau reaches `scale_invariant_steps`; all workers
  read the same tau, so stop after the same update."""

  def __init__(self, scale_invariant_steps):
    if scale_invariant_steps <= 0:
      raise errors.ConfigError("scale_invariant_steps must be > 0, got "
                               f"{scale_invariant_steps}")
    self._target = scale_invariant_steps

  def begin(self):
    var = _variable(adascale.PROGRESS)
    if var is None:
      raise errors.ConfigError(
          "scale_invariant_steps needs lr_scaling='adascale' (no "
          "adascale/progress variable in the graph)")
    self._progress = var.read_value()

  def after_create_session(self, session, coord):
    if session.run(self._progress) >= self._target:
      coord.request_stop()

  def after_run(self, run_context, run_values):
    # Read after the update: a fetch in the same run may precede tau's advance.
    if run_context.session.run(self._progress) >= self._target:
      run_context.request_stop()


class LastStepHook(tf.compat.v1.train.SessionRunHook):
  """Remembers the step training ended at and whether its input ran out (an
  OutOfRangeError run gets `before_run` but no `after_run`)."""

  def __init__(self):
    self.last_step = None
    self.input_ended = False

  def begin(self):
    self._step = tf.compat.v1.train.get_global_step()

  def before_run(self, run_context):
    self.input_ended = True  # unless the run completes

  def after_run(self, run_context, run_values):
    self.input_ended = False

  def end(self, session):
    self.last_step = int(session.run(self._step))

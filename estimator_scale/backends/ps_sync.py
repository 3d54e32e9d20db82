"""Synchronous parameter servers: one update averages all workers' gradients."""
import tensorflow as tf

from estimator_scale import environment
from estimator_scale import errors
from estimator_scale.backends import reducers
from estimator_scale import gradients

_SCOPE = "ps_sync"
_STEP_KEY = "ps_sync_update_step"


def _queue_name(worker):
  return f"{_SCOPE}/token_{worker}"


def _token_queue(worker, device):
  """Worker `worker`'s token queue, one resource on `device` for all tasks."""
  with tf.device(device):
    return tf.queue.FIFOQueue(-1, tf.int64, shapes=[], name=_queue_name(worker),
                              shared_name=_queue_name(worker))


def _unique_rows(grad):
  """An IndexedSlices with each row once (duplicates summed)."""
  rows, position = tf.unique(grad.indices)
  values = tf.math.unsorted_segment_sum(grad.values, position,
                                        tf.shape(rows)[0])
  return rows, values


def _update_step():
  """global_step as this update reads it: one read per graph before any apply,
  shared by a canned estimator's two optimizers."""
  graph = tf.compat.v1.get_default_graph()
  found = graph.get_collection(_STEP_KEY)
  if found:
    return found[0]
  step = tf.compat.v1.train.get_or_create_global_step().read_value()
  graph.add_to_collection(_STEP_KEY, step)
  return step


def _identity(value):
  if isinstance(value, tf.IndexedSlices):
    return tf.IndexedSlices(tf.identity(value.values),
                            tf.identity(value.indices), value.dense_shape)
  return tf.identity(value)


def _shape(grad, variable):
  """A gradient's shape; sparse rows may be wider (CowClip's counts column)."""
  if isinstance(grad, tf.IndexedSlices):
    return variable.shape[:1].concatenate(grad.values.shape[1:])
  return variable.shape


class _Slot:
  """One value's accumulator on `device`, shared by every task by name."""

  def __init__(self, grad, shape, device, name):
    self.sparse = isinstance(grad, tf.IndexedSlices)
    make = (tf.compat.v1.SparseConditionalAccumulator if self.sparse else
            tf.compat.v1.ConditionalAccumulator)
    shared = f"{_SCOPE}/{name}"
    with tf.device(device):
      self.accumulator = make(tf.float32, shape=shape,
                              shared_name=shared, name=shared.replace(":", "_"),
                              reduction_type="SUM")

  def push(self, grad, local_step):
    if self.sparse:
      rows, values = _unique_rows(grad)
      return self.accumulator.apply_grad(rows, values, local_step=local_step)
    return self.accumulator.apply_grad(grad, local_step=local_step)

  def take(self, workers):
    """The sum of `workers` pushes, once they are in."""
    if self.sparse:
      return self.accumulator.take_indexed_slices_grad(workers)
    return self.accumulator.take_grad(workers)


class SyncReducer(reducers.LocalReducer):
  """Synchronous ps: the chief averages and applies, others `contribute`."""

  def __init__(self, num_workers, worker_index, is_chief):
    self._workers = num_workers
    self._worker = worker_index
    self.applies_updates = is_chief
    self._variables = None
    self._loss = None
    self._shared = []  # (slot, this worker's vector) of each_worker
    self._taken = []  # (slot, what its take returned) of all_mean
    self._vectors = []  # each_worker's vectors, as all_mean took them
    self._local_step = None

  def expect(self, variables, loss):
    """See base class."""
    self._variables = list(variables)
    self._loss = loss

  def _push(self, grads, variables, sums, loss):
    """Pushes this worker's gradients and scalars, marked with their step, after
    the loss (so every variable was read before any gradient is in)."""
    device = tf.compat.v1.train.get_or_create_global_step().device
    self._local_step = step = _update_step()
    slots, pushes = [], []
    with tf.control_dependencies([loss]):
      for grad, variable in zip(grads, variables):
        slot = None if grad is None else _Slot(
            grad, _shape(grad, variable), variable.device, variable.op.name)
        slots.append(slot)
        if slot is not None:
          pushes.append(slot.push(gradients.cast(grad, tf.float32), step))
      for index, value in enumerate(sums):
        scalar = tf.reshape(tf.cast(value, tf.float32), [])
        # Named after the first variable: a canned estimator's two
        # optimizers each push their own sums.
        slots.append(_Slot(scalar, [], device,
                           f"{variables[0].op.name}/sum_{index}"))
        pushes.append(slots[-1].push(scalar, step))
      pushes += [slot.push(mine, step) for slot, mine in self._shared]
    return slots, pushes

  def each_worker(self, value, replicas_per_worker):
    """See base class: a vector accumulator pushed with the gradients."""
    del replicas_per_worker  # a worker pushes one figure, whatever its replicas
    own = tf.cast(value, tf.float32)
    mine = tf.one_hot(self._worker, self._workers) * own
    slot = _Slot(mine, [self._workers],
                 tf.compat.v1.train.get_or_create_global_step().device,
                 f"each_worker_{len(self._shared)}")
    index = len(self._shared)
    self._shared.append((slot, mine))
    if not self.applies_updates:
      return lambda: tf.reshape(own, [1])

    def every():
      """Call after `all_mean`, which pushed and took every vector."""
      return self._vectors[index]
    return every

  def contribute(self, grads, variables, sums, loss):
    """A non-chief worker's update: push, then wait for the chief's apply."""
    _, pushes = self._push(grads, variables, sums, loss)
    global_step = tf.compat.v1.train.get_or_create_global_step()
    with tf.control_dependencies(pushes):
      return _token_queue(self._worker, global_step.device).dequeue()

  def all_mean(self, grads, sums):
    """See base class; the chief's only: it waits for every worker's."""
    if not self.applies_updates or self._variables is None:
      raise errors.UsageError(
          "with synchronous parameter servers the chief reduces after "
          "expect(variables, loss), and the other workers call "
          "contribute()")
    slots, pushes = self._push(grads, self._variables, sums, self._loss)
    with tf.control_dependencies(pushes):
      taken = [None if slot is None else slot.take(self._workers)
               for slot in slots]
      # Taken before the tokens go, as the gradients are: a worker let go
      # pushes its next update's vector, which an accumulator not yet
      # taken would sum into this one, leaving the last update of the job
      # one push short (the chief then waited for it until the timeout).
      self._vectors = [slot.take(self._workers) for slot, _ in self._shared]
    self._taken = [(slot, t) for slot, t in zip(slots, taken)
                   if slot is not None]
    self._taken += [(slot, t) for (slot, _), t in
                    zip(self._shared, self._vectors)]
    # No variable may change before every gradient is in: a worker's
    # gradient of one variable may read another (an embedding's reads the
    # weights after it), and its push of the first does not wait for that.
    with tf.control_dependencies([t.op for _, t in self._taken]):
      taken = [None if t is None else _identity(t) for t in taken]
    means = [None if t is None else gradients.scale(t, 1.0 / self._workers)
             for t in taken[:len(grads)]]
    return means, taken[len(grads):]

  def apply_reduced(self, optimizer, grads, variables, global_step):
    """See base class; then marks the new step and hands out worker tokens."""
    return self.applied(super().apply_reduced(optimizer, grads, variables,
                                              global_step))

  def applied(self, update):
    """See base class: after `update`, the marks and the tokens."""
    device = tf.compat.v1.train.get_or_create_global_step().device
    new_step = self._local_step + 1
    with tf.control_dependencies([update] + [t.op for _, t in self._taken]):
      marks = [slot.accumulator.set_global_step(new_step)
               for slot, _ in self._taken]
      tokens = [_token_queue(w, device).enqueue(new_step)
                for w in range(self._workers) if w != self._worker]
    return tf.group(update, *marks, *tokens)

  def apply_mean(self, optimizer, grads, variables, global_step):
    """See base class."""
    if self._variables is None:
      raise errors.UsageError("call expect(variables, loss) first")
    return super().apply_mean(optimizer, grads, variables, global_step)


class TimeoutHook(tf.estimator.SessionRunHook):
  """Times out each session run after `seconds`; remembers the last update
  seen to end, for `timeout_error`."""

  def __init__(self, seconds, task):
    self.seconds = seconds
    self.task = task
    self.last_step = None
    self._global_step = None

  def begin(self):
    self._global_step = tf.compat.v1.train.get_global_step()

  def before_run(self, run_context):
    options = None
    if self.seconds:
      options = tf.compat.v1.RunOptions(
          timeout_in_ms=int(self.seconds * 1000))
    return tf.estimator.SessionRunArgs(self._global_step, options=options)

  def after_run(self, run_context, run_values):
    self.last_step = run_values.results

  def timeout_error(self):
    """The error that replaces TensorFlow's DeadlineExceededError."""
    after = ("its first update" if self.last_step is None else
             f"the update after step {self.last_step}")
    return errors.TopologyError(
        f"ps_sync: {self.task} waited {self.seconds:g} s in {after} for "
        "the other workers of a synchronous parameter-server job (the chief "
        "waits for every worker's gradients, a worker for the chief's "
        "apply): a task has stopped or is unreachable (see its log; "
        "estimator-scale-launch names a task that exited). Raise "
        f"{environment.COLLECTIVE_TIMEOUT} if a first update is this slow")

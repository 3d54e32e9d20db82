"""Evaluation and prediction on every Horovod rank, for tables split over
the ranks: every lookup is a collective, so a rank out of batches reads
empty ones until all are. Metric totals are summed (a non-sum state would
combine wrongly)."""
import shutil
import tempfile

from absl import logging
import tensorflow as tf
from tensorflow.python.util import function_utils  # pylint: disable=g-direct-tensorflow-import

from estimator_scale import errors
from estimator_scale.embeddings import sharded


def _zero_rows(spec):
  """A value of `spec` with no rows (inner sizes unknown: 0), made from the
  spec so that a rank whose input is empty from the start pads as well."""
  if spec.shape.rank == 0:
    return tf.zeros([], spec.dtype)
  if spec.shape.rank is None:
    raise errors.ConfigError(
        f"input on Horovod ranks: no empty batch can be made of {spec}, "
        "whose rank is unknown; give its shape (tf.ensure_shape)")
  inner = [size or 0 for size in spec.shape.as_list()[1:]]
  if isinstance(spec, tf.TensorSpec):
    return tf.zeros([0] + inner, spec.dtype)
  if isinstance(spec, tf.SparseTensorSpec):
    return tf.SparseTensor(tf.zeros([0, len(inner) + 1], tf.int64),
                           tf.zeros([0], spec.dtype), [0] + inner)
  if isinstance(spec, tf.RaggedTensorSpec) and spec.ragged_rank == 1:
    return tf.RaggedTensor.from_row_splits(
        tf.zeros([0] + inner[1:], spec.dtype),
        tf.zeros([1], spec.row_splits_dtype))
  raise errors.ConfigError(
      f"input on Horovod ranks: no empty batch can be made of {spec}; give "
      "dense, sparse or one-level ragged tensors")


def _rows(features, labels):
  """The examples in a batch, from its first tensor with a batch dimension."""
  for value in tf.nest.flatten((features, labels), expand_composites=False):
    if isinstance(value, tf.SparseTensor):
      return value.dense_shape[0]
    if isinstance(value, tf.RaggedTensor):
      return value.nrows()
    if value.shape.rank:
      return tf.shape(value, out_type=tf.int64)[0]
  raise errors.ConfigError(
      "evaluation or prediction on Horovod ranks needs features or labels "
      "with a batch dimension, to tell the ranks' last batches")


def _call_input_fn(input_fn, mode, params, config):
  """`input_fn` called as Estimator calls it: with the arguments it takes."""
  args = function_utils.fn_args(input_fn)
  given = {"mode": mode, "params": params, "config": config}
  return input_fn(**{k: v for k, v in given.items() if k in args})


def split_input(input_fn, rank, size, steps):
  """The input_fn of `rank`'s share of the first `steps` batches, then empty
  ones without end.

  Raises:
    ConfigError: `input_fn` returns no tf.data.Dataset.
  """

  def share(mode, params, config):
    dataset = _call_input_fn(input_fn, mode, params, config)
    if not isinstance(dataset, tf.data.Dataset):
      raise errors.ConfigError(
          "evaluation and prediction on Horovod ranks end each rank's "
          "batches with empty ones, so their input_fn must return a "
          f"tf.data.Dataset, got {type(dataset).__name__}")
    if steps is not None:
      dataset = dataset.take(steps)
    padding = tf.data.Dataset.from_tensors(
        tf.nest.map_structure(_zero_rows, dataset.element_spec)).repeat()
    return dataset.shard(size, rank).concatenate(padding)
  return share


class _SumOverRanksHook(tf.compat.v1.train.SessionRunHook):
  """Ends when no rank has a batch left or one asked; sums metric totals."""

  def __init__(self, hvd, rows, stop_asked):
    self._hvd = hvd
    self._real = rows > 0
    self._stop_asked = stop_asked
    self._asks = tf.compat.v1.placeholder_with_default(False, [])
    self._votes = hvd.allreduce(
        tf.cast(tf.stack([self._real, self._asks]), tf.float32),
        op=hvd.Sum, name="evaluation_ranks_with_rows")
    self.steps = 0
    self.empty_steps = 0

  def begin(self):
    # By name: Estimator adds Keras metrics' variables from a set, in an
    # order that differs between processes.
    totals = sorted(tf.compat.v1.get_collection(
        tf.compat.v1.GraphKeys.METRIC_VARIABLES), key=lambda v: v.name)
    summed = self._hvd.grouped_allreduce(
        [v.read_value() for v in totals], op=self._hvd.Sum,
        name="evaluation_metric_totals") if totals else []
    self._sum = tf.group([v.assign(s) for v, s in zip(totals, summed)])

  def before_run(self, run_context):
    return tf.compat.v1.train.SessionRunArgs(
        (self._real, self._votes),
        feed_dict={self._asks: bool(self._stop_asked)})

  def after_run(self, run_context, run_values):
    real, (ranks_with_rows, ranks_asking) = run_values.results
    self.steps += 1
    self.empty_steps += int(not real)
    if ranks_with_rows == 0 or ranks_asking > 0:
      run_context.request_stop()

  def end(self, session):
    session.run(self._sum)


class _Deferred(tf.compat.v1.train.SessionRunHook):
  """`hook`, its stop made every rank's one batch later: alone, it hangs."""

  def __init__(self, hook, stop_asked):
    self._hook = hook
    self._stop_asked = stop_asked

  def begin(self):
    self._hook.begin()

  def after_create_session(self, session, coord):
    self._hook.after_create_session(session, coord)

  def _own_context(self, run_context):
    return tf.compat.v1.train.SessionRunContext(
        run_context.original_args, run_context.session)

  def _note(self, context):
    if context.stop_requested:
      self._stop_asked.append(True)

  def before_run(self, run_context):
    context = self._own_context(run_context)
    args = self._hook.before_run(context)
    self._note(context)
    return args

  def after_run(self, run_context, run_values):
    context = self._own_context(run_context)
    self._hook.after_run(context, run_values)
    self._note(context)

  def end(self, session):
    self._hook.end(session)


def _deferred(hooks, stop_asked):
  return [_Deferred(hook, stop_asked) for hook in hooks or ()]


def _evaluating_model_fn(model_fn, hvd, hooks, stop_asked):
  """`model_fn` evaluating on the ranks, loss 0 on an empty batch."""

  def on_ranks(features, labels, mode, params, config):
    rows = _rows(features, labels)
    with sharded.read_on_ranks():
      spec = model_fn(features, labels, mode, params, config)
    hook = _SumOverRanksHook(hvd, rows, stop_asked)
    hooks.append(hook)
    loss = tf.where(rows > 0, spec.loss, tf.zeros_like(spec.loss))
    return spec._replace(loss=loss, evaluation_hooks=_deferred(
        spec.evaluation_hooks, stop_asked) + [hook])
  return on_ranks


def _predicting_model_fn(model_fn, hvd, stop_asked):
  """`model_fn` predicting on the ranks until none has a batch left."""

  def on_ranks(features, labels, mode, params, config):
    rows = _rows(features, labels)
    with sharded.read_on_ranks():
      spec = model_fn(features, labels, mode, params, config)
    return spec._replace(prediction_hooks=_deferred(
        spec.prediction_hooks, stop_asked) + [
            _SumOverRanksHook(hvd, rows, stop_asked)])
  return on_ranks


def predict(estimator, input_fn, hvd, checkpoint_path, hooks=None,
            yield_single_examples=True, **kwargs):
  """Yields this rank's predictions of its own input."""
  if hvd.rank() == 0:
    logging.info("Predicting from %s on %d Horovod ranks: its tables are "
                 "split over them", checkpoint_path, hvd.size())
  stop_asked = []
  on_ranks = tf.estimator.Estimator(
      _predicting_model_fn(estimator._model_fn, hvd, stop_asked),  # pylint: disable=protected-access
      config=estimator.config, params=estimator.params)
  batches = on_ranks.predict(
      split_input(input_fn, 0, 1, None), checkpoint_path=checkpoint_path,
      hooks=_deferred(hooks, stop_asked), yield_single_examples=False,
      **kwargs)
  try:
    for batch in batches:
      rows = on_ranks._extract_batch_length(batch)  # pylint: disable=protected-access
      if not yield_single_examples:
        if rows:
          yield batch
      elif isinstance(batch, dict):
        for i in range(rows):
          yield {key: value[i] for key, value in batch.items()}
      else:
        yield from batch
  finally:
    # Each batch's lookups are collectives: a rank that stops early (a
    # break, an error in the caller's loop) runs its batches to the end
    # unseen, so that the others are not left waiting.
    for _ in batches:
      pass


def evaluate(estimator, input_fn, hvd, checkpoint_path, steps=None,
             hooks=None, name=None):
  """Evaluates `checkpoint_path` on every rank, each a share of the `steps`
  batches (None: the whole input); rank 0 keeps the summaries."""
  if hvd.rank() == 0:
    logging.info("Evaluating %s on %d Horovod ranks: its tables are split "
                 "over them", checkpoint_path, hvd.size())
  made, stop_asked = [], []
  scratch = None if hvd.rank() == 0 else tempfile.mkdtemp(
      prefix=f"estimator_scale_eval_rank{hvd.rank()}_")
  config = estimator.config
  if scratch is not None:
    config = config.replace(model_dir=scratch)
  on_ranks = tf.estimator.Estimator(
      _evaluating_model_fn(estimator._model_fn, hvd, made, stop_asked),  # pylint: disable=protected-access
      config=config, params=estimator.params)
  try:
    result = on_ranks.evaluate(
        split_input(input_fn, hvd.rank(), hvd.size(), steps),
        hooks=_deferred(hooks, stop_asked),
        checkpoint_path=checkpoint_path, name=name)
  finally:
    if scratch is not None:
      shutil.rmtree(scratch, ignore_errors=True)
  batches = hvd.size() * made[-1].steps
  empty = sum(hvd.allgather_object(made[-1].empty_steps,
                                   name="evaluation_empty_batches"))
  if "loss" in result and batches > empty:
    result["loss"] = type(result["loss"])(
        float(result["loss"]) * batches / (batches - empty))
  return result

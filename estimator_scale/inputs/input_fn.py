"""The input_fn every builder returns, and the one path it reads by."""
import dataclasses
from typing import Any, Callable, Optional

from absl import logging
import tensorflow as tf

from estimator_scale import data_options
from estimator_scale import errors
from estimator_scale import topology as topology_lib
from estimator_scale.inputs import file_shards
from estimator_scale.inputs import position

AUTOTUNE = tf.data.AUTOTUNE


@dataclasses.dataclass(frozen=True)
class Plan:
  """What an input reads and how, fixed when it is built: `files` (by `read`)
  or `count` array indices, `parse`, shuffle `window`, `whole_files`."""
  builder: str
  global_batch_size: int
  training: bool
  seed: Optional[int]
  window: int
  parse: Callable
  parse_batches: bool = False
  files: tuple = ()
  read: Optional[Callable] = None
  count: int = 0
  cycle_length: int = 1
  deterministic: bool = True
  whole_files: bool = False
  skip_corrupt: bool = False
  span: Any = None


class InputFn:
  """An Estimator input_fn over a `Plan`; `topology` is None until the
  Estimator gives its own (without one: one local process)."""

  def __init__(self, plan, topology=None, accumulation_steps=None,
               make_dataset=None):
    """Checks the batch now; `make_dataset` replaces `read` for `synthetic`."""
    self.plan = plan
    self.files = plan.files
    self.topology = topology
    self.accumulation_steps = accumulation_steps
    self._make_dataset = make_dataset or read
    self._replica_batch = _replica_batch(
        plan, topology or topology_lib.Topology(), accumulation_steps or 1)

  def for_estimator(self, topology, accumulation_steps=1):
    """This input as the Estimator of `topology` runs it.

    Raises:
      ConfigError: built for another topology, or the batch does not divide.
    """
    if self.topology is not None:
      self.topology.require_estimators(
          topology, f"{self.plan.builder}: inputs built for")
    return InputFn(self.plan, topology,
                   self.accumulation_steps or accumulation_steps,
                   self._make_dataset)

  def __call__(self, params=None, input_context=None, config=None):
    del params  # every setting was fixed when the input_fn was built
    topology = self.topology or self._alone(input_context, config)
    dataset = self._make_dataset(self.plan, topology, self._replica_batch,
                                 input_context,
                                 getattr(config, "model_dir", None))
    return data_options.without_tuning_thread(dataset)

  def _alone(self, input_context, config):
    """One local process; training refuses a call showing a larger job, whose
    share it cannot know."""
    replicas = input_context.num_replicas_in_sync if input_context else 1
    workers = max(getattr(config, "num_worker_replicas", 1) or 1,
                  input_context.num_input_pipelines if input_context else 1)
    if self.plan.training and max(replicas, workers) > 1:
      raise errors.ConfigError(
          f"{self.plan.builder}: built without topology= and called by an "
          f"Estimator of {workers} worker(s), {replicas} replica(s) in "
          "sync that es.make_estimator did not make, so it cannot know its "
          "share: train through es.make_estimator, or pass "
          "topology=build_run_config(...).topology")
    return topology_lib.Topology()


def _replica_batch(plan, topology, accumulation_steps):
  """Examples one replica reads per batch (training splits the global batch)."""
  size = plan.global_batch_size
  if plan.training:
    return topology.replica_batch_size(size, accumulation_steps)
  if size is None or size < 1:
    raise errors.ConfigError("global_batch_size must be a positive integer, "
                             f"got {size!r}")
  return size


def read(plan, topology, replica_batch, input_context, model_dir):
  """The Dataset of `plan`, its stages in order (see the module's doc)."""
  shards, index = _shards(plan, topology, input_context)
  if plan.span is not None and plan.training:
    return _span_batches(plan, _span_records(plan, model_dir), shards, index,
                         replica_batch)
  if plan.training and topology.synchronous:
    # Asynchronous workers' examples are not a function of the step.
    start = position.resume(model_dir, plan.global_batch_size, shards,
                            topology.is_chief)
    records = _resumed(plan, start, shards, index, model_dir)
  else:
    records = _unresumed(plan, shards, index)
  if plan.parse_batches:
    records = records.batch(replica_batch, drop_remainder=plan.training)
  records = records.map(plan.parse, num_parallel_calls=AUTOTUNE)
  if not plan.parse_batches:
    records = records.batch(replica_batch, drop_remainder=plan.training)
  return records.prefetch(AUTOTUNE)


def _shards(plan, topology, input_context):
  """(number of shards, this worker's shard); evaluation reads everything."""
  if not plan.training:
    return 1, 0
  if input_context is not None and input_context.num_input_pipelines > 1:
    shards, index = (input_context.num_input_pipelines,
                     input_context.input_pipeline_id)
  else:
    shards, index = topology.num_workers, topology.worker_index
  if plan.count and shards > 1 and plan.count < shards:
    raise errors.ConfigError(f"{plan.builder}: {plan.count} examples cannot "
                             f"be sharded over {shards} workers")
  return shards, index


def _epoch_records(plan):
  """epoch -> the records of one epoch in their base order, for `stream`."""
  if plan.count:
    return lambda epoch: tf.data.Dataset.range(plan.count)
  return position.file_records(plan.files, plan.read, plan.seed,
                               plan.cycle_length)


def _resumed(plan, start, shards, index, model_dir):
  """This worker's training records from the `start` position on."""
  if plan.whole_files:
    history = position.read_history(model_dir) if model_dir else []
    if file_shards.by_file(len(plan.files), shards):
      return file_shards.worker_records(plan, start, history, model_dir,
                                        shards, index)
    if start.examples and any(
        file_shards.by_file(len(plan.files), e["workers"])
        for e in history if e["step"] <= start.step):
      logging.warning("%s: %d workers read %d files by record, and the job "
                      "read them by file before: the records start over in "
                      "another order", plan.builder, shards, len(plan.files))
  epoch_records = _epoch_records(plan)
  count = ((lambda: plan.count) if plan.count else
           (lambda: position.count(epoch_records(0))))
  records = position.stream(epoch_records, count, start.examples, plan.seed,
                            plan.window or None)
  return position.worker_share(records, plan.global_batch_size, shards, index)


def _unresumed(plan, shards, index):
  """This worker's records without a position (evaluation, async training)."""
  by_file = plan.whole_files and shards > 1 and len(plan.files) >= shards
  by_record = shards > 1 and not by_file
  if plan.count:
    records = tf.data.Dataset.range(plan.count)
  else:
    names = tf.data.Dataset.from_tensor_slices(list(plan.files))
    if by_file:
      names = names.shard(shards, index)
    # Record sharding needs one fixed record order on every worker, so files
    # are only shuffled when each worker owns whole files.
    if (plan.whole_files and plan.training and plan.seed is not None and
        not by_record):
      names = names.shuffle(len(plan.files), seed=plan.seed)
    if by_record and not plan.deterministic:
      logging.warning("%s: %d files for %d workers shard by record, which "
                      "needs a fixed order: deterministic=False does not "
                      "apply", plan.builder, len(plan.files), shards)
    records = names.interleave(
        plan.read, cycle_length=min(plan.cycle_length, len(plan.files)),
        num_parallel_calls=AUTOTUNE,
        deterministic=plan.deterministic or by_record)
  if by_record:
    records = records.shard(shards, index)
  if plan.training:
    if plan.window:
      records = records.shuffle(plan.window, seed=plan.seed)
    records = records.repeat()
  return records


def _span_records(plan, model_dir):
  """What the plan's span (a day) has left to train, in the epoch's order."""
  span = plan.span
  done = position.span_done(model_dir, span, plan.global_batch_size)
  return position.stream(_epoch_records(plan), lambda: span.records, done,
                         plan.seed, plan.window or None).take(
                             span.examples - done)


def _span_batches(plan, records, shards, index, replica_batch):
  """This worker's batches of a span's `records`, ending at the same update on
  every worker; the last may be short, split evenly."""
  pieces = max(1, plan.global_batch_size // (shards * replica_batch))

  def worker_part(batch):
    size = tf.shape(batch)[0]
    return batch[index * size // shards:(index + 1) * size // shards]

  def replica_batches(rows):
    parts = tf.data.Dataset.from_tensor_slices(rows)
    if not plan.parse_batches:
      parts = parts.map(plan.parse)
    return parts.batch(tf.cast(tf.shape(rows)[0] // pieces, tf.int64))

  dataset = records.batch(plan.global_batch_size).map(worker_part).flat_map(
      replica_batches)
  if plan.parse_batches:
    dataset = dataset.map(plan.parse, num_parallel_calls=AUTOTUNE)
  return dataset.prefetch(AUTOTUNE)

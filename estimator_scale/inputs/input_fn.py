"""The input_fn every builder returns, and the plumbing they share.

An input reads for its `Topology`: left out, the Estimator's (handed over
by `InputFn.for_estimator` before any graph is built); given, it must be
the Estimator's.
"""
import tensorflow as tf

from estimator_scale import data_options
from estimator_scale import errors
from estimator_scale import topology as topology_lib
from estimator_scale.inputs import position

AUTOTUNE = tf.data.AUTOTUNE


class InputFn:
  """An Estimator input_fn, and the job it reads for and the files it reads.

  `files` (() for in-memory data) let an unreadable record's file be named;
  `topology` and `accumulation_steps` are None until the Estimator gives
  its own. Called without a topology, it reads as one local process.
  """

  def __init__(self, make_dataset, files, global_batch_size, training=True,
               topology=None, accumulation_steps=None, builder="input"):
    """Checks the batch at once, against `topology` where given.

    `make_dataset` is (topology, replica batch size, input_context,
    model_dir) -> tf.data.Dataset; `builder` names the input in messages.
    """
    self._make_dataset = make_dataset
    self.files = tuple(files)
    self.global_batch_size = global_batch_size
    self.training = training
    self.topology = topology
    self.accumulation_steps = accumulation_steps
    self._builder = builder
    self._replica_batch = _replica_batch(
        global_batch_size, training, topology or topology_lib.Topology(),
        accumulation_steps or 1)

  def for_estimator(self, topology, accumulation_steps=1):
    """This input as the Estimator of `topology` runs it.

    Raises:
      ConfigError: the input was built for another topology (naming both),
        or its batch does not divide over `topology`'s replicas.
    """
    if self.topology is not None:
      self.topology.require_estimators(
          topology, f"{self._builder}: inputs built for")
    return InputFn(self._make_dataset, self.files, self.global_batch_size,
                   self.training, topology,
                   self.accumulation_steps or accumulation_steps,
                   self._builder)

  def __call__(self, params=None, input_context=None, config=None):
    del params  # every setting was fixed when the input_fn was built
    topology = self.topology or self._alone(input_context, config)
    dataset = self._make_dataset(topology, self._replica_batch, input_context,
                                 getattr(config, "model_dir", None))
    return data_options.without_tuning_thread(dataset)

  def _alone(self, input_context, config):
    """One local process; a training input refuses a call whose context or
    RunConfig shows a larger job, whose share it cannot know.
    """
    replicas = input_context.num_replicas_in_sync if input_context else 1
    workers = max(getattr(config, "num_worker_replicas", 1) or 1,
                  input_context.num_input_pipelines if input_context else 1)
    if self.training and max(replicas, workers) > 1:
      raise errors.ConfigError(
          f"{self._builder}: built without topology= and called by an "
          f"Estimator of {workers} worker(s), {replicas} replica(s) in "
          "sync that es.make_estimator did not make, so it cannot know its "
          "share: train through es.make_estimator, or pass "
          "topology=build_run_config(...).topology")
    return topology_lib.Topology()


def _replica_batch(global_batch_size, training, topology, accumulation_steps):
  """The examples one replica reads per batch: training splits the global
  batch over the job and micro-batches, evaluation takes it as given.
  """
  if training:
    return topology.replica_batch_size(global_batch_size, accumulation_steps)
  if global_batch_size is None or global_batch_size < 1:
    raise errors.ConfigError("global_batch_size must be a positive integer, "
                             f"got {global_batch_size!r}")
  return global_batch_size


def shards(topology, training, input_context):
  """(number of shards, this worker's shard); evaluation reads everything."""
  if not training:
    return 1, 0
  if input_context is not None and input_context.num_input_pipelines > 1:
    return input_context.num_input_pipelines, input_context.input_pipeline_id
  return topology.num_workers, topology.worker_index


def resumes(training, topology):
  """Whether the input resumes at a position: training in a synchronous
  job (asynchronous workers' examples are not a function of the step).
  """
  return training and topology.synchronous


def start(model_dir, global_batch_size, num_shards, topology):
  """The `position.Position` a training run starts at."""
  return position.resume(model_dir, global_batch_size, num_shards,
                         topology.is_chief)


def finish(dataset, training, replica_batch, seed, shuffle_buffer, parse=None,
           parse_batches=False):
  """Shuffle, repeat, parse, batch, prefetch, in the order that keeps it fast
  (`parse_batches` parses a batch in one vectorised call).
  """
  if training:
    if shuffle_buffer:
      dataset = dataset.shuffle(shuffle_buffer, seed=seed)
    dataset = dataset.repeat()
  if parse is not None and not parse_batches:
    dataset = dataset.map(parse, num_parallel_calls=AUTOTUNE)
  dataset = dataset.batch(replica_batch, drop_remainder=training)
  if parse is not None and parse_batches:
    dataset = dataset.map(parse, num_parallel_calls=AUTOTUNE)
  return dataset.prefetch(AUTOTUNE)


def read_span(span, epoch_records, model_dir, global_batch_size, num_shards,
              index, replica_batch, seed, window, parse_each=None,
              parse_batch=None):
  """This worker's batches of what `span` has left to train, then the end,
  at the same update on every worker; the last may be short, split evenly.
  """
  done = position.span_done(model_dir, span, global_batch_size)
  records = position.stream(epoch_records, lambda: span.records, done, seed,
                            window or None).take(span.examples - done)
  pieces = max(1, global_batch_size // (num_shards * replica_batch))

  def worker_part(batch):
    size = tf.shape(batch)[0]
    return batch[index * size // num_shards:(index + 1) * size // num_shards]

  def replica_batches(rows):
    parts = tf.data.Dataset.from_tensor_slices(rows)
    if parse_each is not None:
      parts = parts.map(parse_each)
    return parts.batch(tf.cast(tf.shape(rows)[0] // pieces, tf.int64))

  dataset = records.batch(global_batch_size).map(worker_part).flat_map(
      replica_batches)
  if parse_batch is not None:
    dataset = dataset.map(parse_batch, num_parallel_calls=AUTOTUNE)
  return dataset.prefetch(AUTOTUNE)

"""Estimator input_fn builders: arrays, TFRecord files, CSV files, synthetic data.

Every builder takes the *global* batch size (examples per update over the
whole job) and serves each replica its share, global / (workers x replicas),
which the model_fn splits into accumulation micro-batches. Training input is
sharded per worker, shuffled with a seed, repeated (so ranks never run out of
data at different steps) and batched with drop_remainder; evaluation input
is one ordered pass over everything. Files are found and read through
tf.io.gfile and tf.data, so gs://, hdfs://, s3:// and ram:// paths work.
"""
import os

from absl import logging
import numpy as np
import tensorflow as tf

from estimator_scale import errors
from estimator_scale import topology as topology_lib

AUTOTUNE = tf.data.AUTOTUNE


def _shard_of(topology, input_context):
  """(number of shards, this worker's shard) for training input."""
  if input_context is not None and input_context.num_input_pipelines > 1:
    return input_context.num_input_pipelines, input_context.input_pipeline_id
  return topology.num_workers, topology.worker_index


def _finish(dataset, training, replica_batch, seed, shuffle_buffer, parse=None,
            parse_batches=False):
  """Shuffle, repeat, parse, batch, prefetch: the order that keeps it fast.

  `parse_batches` parses after batching (one vectorised call per batch, as
  tf.io.parse_example allows) instead of once per record.
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


class _Builder:
  """Shared arguments of the builders; `__call__` is the Estimator input_fn."""

  def __init__(self, global_batch_size, training, topology, accumulation_steps,
               seed, shuffle_buffer):
    self.topology = topology or topology_lib.local()
    self.training = training
    self.seed = seed
    self.shuffle_buffer = shuffle_buffer
    if training:
      self.replica_batch = self.topology.replica_batch_size(
          global_batch_size, accumulation_steps)
    else:
      if global_batch_size is None or global_batch_size < 1:
        raise errors.ConfigError(
            "global_batch_size must be a positive integer, got "
            f"{global_batch_size!r}")
      self.replica_batch = global_batch_size

  def shard(self, input_context):
    return _shard_of(self.topology, input_context) if self.training else (1, 0)


class from_arrays(_Builder):  # pylint: disable=invalid-name
  """input_fn over in-memory arrays; records are sharded round-robin.

  Args:
    features: an array or {name: array}, first axis = examples.
    labels: an array (or None), same first axis.
    global_batch_size: examples per update over the whole job.
    training: shuffle/repeat/shard (True) or one ordered pass (False).
    topology: this process's Topology (default: one local process).
    accumulation_steps: micro-batches per update, to check divisibility.
    seed: shuffle seed; None disables shuffling.
    shuffle_buffer: 0 = the whole array.
  """

  def __init__(self, features, labels, global_batch_size, training=True,
               topology=None, accumulation_steps=1, seed=0, shuffle_buffer=0):
    super().__init__(global_batch_size, training, topology, accumulation_steps,
                     seed, shuffle_buffer)
    self.features, self.labels = features, labels
    count = len(labels) if labels is not None else len(
        next(iter(features.values())) if isinstance(features, dict) else features)
    if count == 0:
      raise errors.ConfigError(
          "from_arrays: the data set is empty (0 examples)")
    if isinstance(features, dict):
      for name, array in features.items():
        if len(array) != count:
          raise errors.ConfigError(
              f"from_arrays: feature {name!r} has {len(array)} "
              f"examples, labels have {count}")
    self.count = count

  def __call__(self, params=None, input_context=None):
    del params
    data = (self.features, self.labels) if self.labels is not None else (
        self.features)
    dataset = tf.data.Dataset.from_tensor_slices(data)
    shards, index = self.shard(input_context)
    if shards > 1:
      if self.count < shards:
        raise errors.ConfigError(
            f"from_arrays: {self.count} examples cannot be "
            f"sharded over {shards} workers")
      dataset = dataset.shard(shards, index)
    buffer = (self.shuffle_buffer or self.count) if self.seed is not None else 0
    return _finish(dataset, self.training, self.replica_batch, self.seed,
                   buffer)


def list_files(pattern, flag="file pattern"):
  """Sorted files matching a glob (any tf.io.gfile file system), or a
  ConfigError naming the pattern."""
  files = sorted(tf.io.gfile.glob(pattern))
  if not files:
    raise errors.ConfigError(
        f"{flag} {pattern!r} matches no files; check the path "
        "(globs like data/train-*.tfrecord are allowed)")
  return files


class from_tfrecords(_Builder):  # pylint: disable=invalid-name
  """input_fn over TFRecord files of tf.train.Examples.

  Files are sharded per worker when there are at least as many files as
  workers, records otherwise, so every worker sees a disjoint part.

  Args:
    pattern: a glob of TFRecord files.
    feature_spec: {name: tf.io.FixedLenFeature ...} for tf.io.parse_example.
    label_key: the feature that holds the label (popped from features), or
      None for a label-free model (autoencoder, language model): the input
      then yields features only and Estimator passes labels=None to the
      model_fn.
    deterministic: read files in a fixed order, so a seed reproduces the
      data order; False lets records arrive as they are read (a few percent
      faster). Record sharding (fewer files than workers) needs the fixed
      order, so there it stays on.
    skip_corrupt: drop records that cannot be read (a truncated shard's
      tail) instead of failing; TensorFlow logs each one dropped.
    other arguments: as `from_arrays`.
  """

  def __init__(self, pattern, feature_spec, label_key, global_batch_size,
               training=True, topology=None, accumulation_steps=1, seed=0,
               shuffle_buffer=10000, deterministic=True, skip_corrupt=False):
    super().__init__(global_batch_size, training, topology, accumulation_steps,
                     seed, shuffle_buffer)
    self.files = list_files(pattern, "TFRecord pattern")
    self.feature_spec, self.label_key = feature_spec, label_key
    self.deterministic = deterministic
    self.skip_corrupt = skip_corrupt
    if skip_corrupt:
      logging.warning("from_tfrecords: corrupt records in %s are skipped, "
                      "each one logged by TensorFlow", pattern)

  def _records(self, path):
    records = tf.data.TFRecordDataset(path)
    if self.skip_corrupt:
      records = records.ignore_errors(log_warning=True)
    return records

  def _parse(self, serialized):
    parsed = tf.io.parse_example(serialized, self.feature_spec)
    if self.label_key is None:
      return parsed
    labels = parsed.pop(self.label_key)
    return parsed, labels

  def __call__(self, params=None, input_context=None):
    del params
    shards, index = self.shard(input_context)
    files = tf.data.Dataset.from_tensor_slices(self.files)
    by_file = shards > 1 and len(self.files) >= shards
    by_record = shards > 1 and not by_file
    if by_file:
      files = files.shard(shards, index)
    # Record sharding needs one fixed record order on every worker, so files
    # are only shuffled when each worker owns whole files.
    if self.training and self.seed is not None and not by_record:
      files = files.shuffle(len(self.files), seed=self.seed)
    if by_record and not self.deterministic:
      logging.warning("from_tfrecords: %d files for %d workers shard by "
                      "record, which needs a fixed order: deterministic=False "
                      "does not apply", len(self.files), shards)
    dataset = files.interleave(
        self._records, cycle_length=min(4, len(self.files)),
        num_parallel_calls=AUTOTUNE,
        deterministic=self.deterministic or by_record)
    if by_record:
      dataset = dataset.shard(shards, index)
    buffer = self.shuffle_buffer if self.seed is not None else 0
    return _finish(dataset, self.training, self.replica_batch, self.seed,
                   buffer, parse=self._parse, parse_batches=True)


def write_tfrecord_shards(features, labels, directory, num_shards,
                          prefix="data", label_key="label"):
  """Writes {name: array} and labels as tf.train.Examples to N shard files.

  Examples go round-robin to shards so each shard is a fair sample. Float
  arrays become float_list features, integers int64_list; every feature is
  flattened (its shape comes back through the reader's feature_spec).

  Returns:
    The sorted list of paths written.
  """
  if num_shards < 1:
    raise errors.ConfigError(f"num_shards must be >= 1, got {num_shards}")
  columns = dict(features)
  columns[label_key] = np.asarray(labels)
  count = len(columns[label_key])
  if count == 0:
    raise errors.ConfigError("write_tfrecord_shards: the data set is empty")
  tf.io.gfile.makedirs(directory)
  paths = [os.path.join(directory, f"{prefix}-{i:05d}-of-{num_shards:05d}"
                        ".tfrecord") for i in range(num_shards)]
  writers = [tf.io.TFRecordWriter(p) for p in paths]
  for i in range(count):
    feature = {}
    for name, array in columns.items():
      value = np.asarray(array[i]).reshape(-1)
      if np.issubdtype(value.dtype, np.integer):
        feature[name] = tf.train.Feature(
            int64_list=tf.train.Int64List(value=value.tolist()))
      else:
        feature[name] = tf.train.Feature(
            float_list=tf.train.FloatList(value=value.astype(np.float32)))
    writers[i % num_shards].write(tf.train.Example(
        features=tf.train.Features(feature=feature)).SerializeToString())
  for writer in writers:
    writer.close()
  return paths


def check_csv(files, num_columns):
  """Fails naming the file and line of the first row with a wrong column count."""
  for path in files:
    with tf.io.gfile.GFile(path) as f:
      for number, line in enumerate(f, start=1):
        if line.strip() and len(line.rstrip("\n").split(",")) != num_columns:
          raise errors.DataError(
              f"{path}:{number}: expected {num_columns} comma-separated "
              f"columns, found {len(line.rstrip(chr(10)).split(','))}")


class from_csv(_Builder):  # pylint: disable=invalid-name
  """input_fn over CSV files (no quoting) with a header line or given names.

  Args:
    pattern: a glob of CSV files.
    column_names: names of all columns in order.
    label_column: the column that holds the label.
    column_defaults: per-column default/type, e.g. [[0.0], [0.0], [0]].
    header: whether each file starts with a header line to skip.
    other arguments: as `from_arrays`.
  """

  def __init__(self, pattern, column_names, label_column, column_defaults,
               global_batch_size, training=True, topology=None,
               accumulation_steps=1, seed=0, shuffle_buffer=10000, header=True):
    super().__init__(global_batch_size, training, topology, accumulation_steps,
                     seed, shuffle_buffer)
    if label_column not in column_names:
      raise errors.ConfigError(
          f"from_csv: label column {label_column!r} is not one of "
          f"the columns {column_names}")
    if len(column_defaults) != len(column_names):
      raise errors.ConfigError(
          "from_csv: column_defaults and column_names differ in "
          "length")
    self.files = list_files(pattern, "CSV pattern")
    check_csv(self.files, len(column_names))
    self.names, self.label = list(column_names), label_column
    self.defaults, self.header = column_defaults, header

  def _parse(self, line):
    values = tf.io.decode_csv(line, self.defaults)
    features = dict(zip(self.names, values))
    return features, features.pop(self.label)

  def __call__(self, params=None, input_context=None):
    del params
    shards, index = self.shard(input_context)
    dataset = tf.data.Dataset.from_tensor_slices(self.files).interleave(
        lambda f: tf.data.TextLineDataset(f).skip(1 if self.header else 0),
        cycle_length=1)
    if shards > 1:
      dataset = dataset.shard(shards, index)
    buffer = self.shuffle_buffer if self.seed is not None else 0
    return _finish(dataset, self.training, self.replica_batch, self.seed,
                   buffer, parse=self._parse)


class synthetic(_Builder):  # pylint: disable=invalid-name
  """input_fn of fixed random tensors of a given shape, for throughput work.

  One batch is generated once and repeated, so the pipeline costs nothing
  and the measurement is of the model. Never use it for accuracy claims.

  Args:
    feature_shapes: {name: shape without batch axis}.
    num_classes: labels are ints in [0, num_classes); None gives float labels
      of `label_shape`.
  """

  def __init__(self, feature_shapes, global_batch_size, num_classes=None,
               label_shape=(), training=True, topology=None,
               accumulation_steps=1, seed=0):
    super().__init__(global_batch_size, training, topology, accumulation_steps,
                     seed, 0)
    self.shapes, self.num_classes = dict(feature_shapes), num_classes
    self.label_shape = tuple(label_shape)

  def __call__(self, params=None, input_context=None):
    del params, input_context
    # Made by an op and cached, not embedded as a constant: a large batch in
    # the GraphDef is copied at every stage of building the session.
    dataset = tf.data.Dataset.range(1).map(self._batch).cache()
    return dataset.repeat() if self.training else dataset

  def _batch(self, unused_index):
    n, seed = self.replica_batch, self.seed or 0
    features = {
        name: tf.random.stateless_normal((n,) + tuple(shape), [seed, i])
        for i, (name, shape) in enumerate(sorted(self.shapes.items()))}
    if self.num_classes:
      labels = tf.random.stateless_uniform((n,), [seed, -1], minval=0,
                                           maxval=self.num_classes,
                                           dtype=tf.int64)
    else:
      labels = tf.random.stateless_normal((n,) + self.label_shape, [seed, -1])
    return features, labels

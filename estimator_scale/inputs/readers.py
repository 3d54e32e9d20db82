"""Estimator input_fn builders: arrays, TFRecord, CSV and synthetic data.

Each takes the *global* batch size. Training input repeats (so ranks never
run out at different steps) and resumes where its checkpoint stands.
"""
import os

from absl import logging
import numpy as np
import tensorflow as tf

from estimator_scale import errors
from estimator_scale.inputs import input_fn


def _count(features, labels):
  """The number of examples, checked to agree between features and labels."""
  count = len(labels) if labels is not None else len(
      next(iter(features.values())) if isinstance(features, dict) else features)
  if count == 0:
    raise errors.ConfigError("from_arrays: the data set is empty (0 examples)")
  if isinstance(features, dict):
    for name, array in features.items():
      if len(array) != count:
        raise errors.ConfigError(
            f"from_arrays: feature {name!r} has {len(array)} examples, labels "
            f"have {count}")
  return count


def from_arrays(features, labels, global_batch_size, training=True,
                topology=None, accumulation_steps=None, seed=0,
                shuffle_buffer=0):
  """input_fn over in-memory arrays; returns an `InputFn`.

  Args:
    features: an array or {name: array}, first axis = examples.
    labels: an array (or None), same first axis.
    global_batch_size: examples per update over the whole job.
    training: shuffle/repeat/shard (True) or one ordered pass (False).
    topology: leave it out to take the Estimator's.
    accumulation_steps: None: the Estimator's.
    seed: shuffle seed; None disables shuffling.
    shuffle_buffer: rows per shuffled window; 0 = the whole array.
  """
  count = _count(features, labels)
  data = (features, labels) if labels is not None else features

  def gather(rows):
    return tf.nest.map_structure(lambda array: tf.gather(array, rows), data)

  window = (shuffle_buffer or count) if seed is not None else 0
  return input_fn.InputFn(
      input_fn.Plan("from_arrays", global_batch_size, training, seed, window,
                    gather, parse_batches=True, count=count),
      topology, accumulation_steps)


def list_files(pattern, flag="file pattern"):
  """Sorted files matching a glob (else ConfigError); a list is itself."""
  if isinstance(pattern, (list, tuple)):
    files = sorted(pattern)
  else:
    files = sorted(tf.io.gfile.glob(pattern))
  if not files:
    raise errors.ConfigError(
        f"{flag} {pattern!r} matches no files; check the path "
        "(globs like data/train-*.tfrecord are allowed)")
  return files


def from_tfrecords(pattern, feature_spec, label_key, global_batch_size,
                   training=True, topology=None, accumulation_steps=None,
                   seed=0, shuffle_buffer=10000, deterministic=True,
                   skip_corrupt=False, span=None):
  """input_fn over TFRecord files of tf.train.Examples, sharded by file where
  there are at least as many files as workers, else by record.

  Args:
    pattern: a glob of TFRecord files, or a list of them.
    feature_spec: {name: tf.io.FixedLenFeature ...}.
    label_key: the label's feature, or None for a label-free model.
    deterministic: evaluation: read files in a fixed order.
    skip_corrupt: drop unreadable records instead of failing.
    span: training: a `position.Span`, to read the files once.
    other arguments: as `from_arrays`.
  """
  files = list_files(pattern, "TFRecord pattern")
  if skip_corrupt:
    logging.warning("from_tfrecords: corrupt records in %s are skipped, "
                    "each one logged by TensorFlow", pattern)
  buffer = shuffle_buffer if seed is not None else 0

  def records(path):
    dataset = tf.data.TFRecordDataset(path)
    if skip_corrupt:
      dataset = dataset.ignore_errors(log_warning=True)
    return dataset

  def parse(serialized):
    parsed = tf.io.parse_example(serialized, feature_spec)
    if label_key is None:
      return parsed
    labels = parsed.pop(label_key)
    return parsed, labels

  return input_fn.InputFn(
      input_fn.Plan("from_tfrecords", global_batch_size, training, seed,
                    buffer, parse, parse_batches=True, files=tuple(files),
                    read=records, cycle_length=4, deterministic=deterministic,
                    whole_files=True, skip_corrupt=skip_corrupt, span=span),
      topology, accumulation_steps)


def write_tfrecord_shards(features, labels, directory, num_shards,
                          prefix="data", label_key="label"):
  """Writes features and labels as tf.train.Examples round-robin over N files;
  returns the sorted paths."""
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


def from_csv(pattern, column_names, label_column, column_defaults,
             global_batch_size, training=True, topology=None,
             accumulation_steps=None, seed=0, shuffle_buffer=10000,
             header=True):
  """input_fn over CSV files (no quoting) with a header line or given names;
  `column_defaults` type each column ([[0.0], [0]]), else `from_arrays`."""
  if label_column not in column_names:
    raise errors.ConfigError(f"from_csv: label column {label_column!r} is not "
                             f"one of the columns {column_names}")
  if len(column_defaults) != len(column_names):
    raise errors.ConfigError(
        "from_csv: column_defaults and column_names differ in length")
  names = list(column_names)

  def parse_line(line):
    features = dict(zip(names, tf.io.decode_csv(line, column_defaults)))
    return features, features.pop(label_column)

  files = list_files(pattern, "CSV pattern")
  check_csv(files, len(names))
  return from_csv_lines(files, parse_line, global_batch_size,
                        training=training, topology=topology,
                        accumulation_steps=accumulation_steps, seed=seed,
                        shuffle_buffer=shuffle_buffer, header=header,
                        builder="from_csv")


def from_csv_lines(files, parse_line, global_batch_size, training=True,
                   topology=None, accumulation_steps=None, seed=0,
                   shuffle_buffer=10000, header=True,
                   builder="from_csv_lines", span=None):
  """input_fn over CSV `files`' lines, each parsed by `parse_line` (-> features
  or (features, labels)); else as `from_tfrecords`."""
  buffer = shuffle_buffer if seed is not None else 0

  def lines(path):
    return tf.data.TextLineDataset(path).skip(1 if header else 0)

  return input_fn.InputFn(
      input_fn.Plan(builder, global_batch_size, training, seed, buffer,
                    parse_line, files=tuple(files), read=lines, span=span),
      topology, accumulation_steps)


def synthetic(feature_shapes, global_batch_size, num_classes=None,
              label_shape=(), training=True, topology=None,
              accumulation_steps=None, seed=0):
  """input_fn of one fixed random batch, repeated, for throughput work only:
  `feature_shapes` without batch axis; int labels, or `label_shape` floats."""
  shapes = sorted(dict(feature_shapes).items())
  label_shape = tuple(label_shape)
  seed = seed or 0

  def batch(n):
    features = {name: tf.random.stateless_normal((n,) + tuple(shape),
                                                 [seed, i])
                for i, (name, shape) in enumerate(shapes)}
    if num_classes:
      labels = tf.random.stateless_uniform((n,), [seed, -1], minval=0,
                                           maxval=num_classes, dtype=tf.int64)
    else:
      labels = tf.random.stateless_normal((n,) + label_shape, [seed, -1])
    return features, labels

  def make_dataset(unused_plan, unused_topology, replica_batch,
                   unused_input_context, unused_model_dir):
    # Made by an op and cached, not embedded as a constant: a large batch in
    # the GraphDef is copied at every stage of building the session.
    dataset = tf.data.Dataset.range(1).map(
        lambda unused_index: batch(replica_batch)).cache()
    return dataset.repeat() if training else dataset

  plan = input_fn.Plan("synthetic", global_batch_size, training, seed, 0,
                       None)
  return input_fn.InputFn(plan, topology, accumulation_steps, make_dataset)

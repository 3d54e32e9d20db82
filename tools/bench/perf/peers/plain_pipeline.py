"""A plain tf.data pipeline over TFRecord files, as the tf.data guide writes it.

Parallel interleave of all the files, a shuffle buffer, repeat, batch, one
vectorised `parse_example` per batch on parallel calls, prefetch: the
guide's best practices that hold for files of any size. It reads the same
shards with the same shuffle buffer as the framework's `from_tfrecords`, so
the ratio shows what the framework's builder (sharding, seeding, divisibility
checks) costs over code a user would write by hand. Caching is left out:
it only suits data that fits in memory, which neither side may assume.
"""
import tensorflow as tf

AUTOTUNE = tf.data.AUTOTUNE


def make_input_fn(pattern, feature_spec, label_key, batch_size,
                  shuffle_buffer=2048, seed=0):
  """An Estimator input_fn of (features, labels) batches from `pattern`."""

  def parse(serialized):
    features = tf.io.parse_example(serialized, feature_spec)
    return features, features.pop(label_key)

  def input_fn(params=None):
    del params
    paths = sorted(tf.io.gfile.glob(pattern))
    files = tf.data.Dataset.from_tensor_slices(paths).shuffle(len(paths),
                                                               seed=seed)
    # Every shard read at once: the widest interleave the files allow.
    dataset = files.interleave(tf.data.TFRecordDataset, cycle_length=len(paths),
                               num_parallel_calls=AUTOTUNE, deterministic=False)
    dataset = dataset.shuffle(shuffle_buffer, seed=seed).repeat()
    dataset = dataset.batch(batch_size, drop_remainder=True)
    return dataset.map(parse, num_parallel_calls=AUTOTUNE).prefetch(AUTOTUNE)

  return input_fn

"""Sharded tables the way models are written: a Keras layer, a feature column.

Both wrap `sharded.make_table` and `sharded.lookup`; the column's table
comes through a custom getter around its own variable creation, so
`input_layer` and `DenseFeatures` name it as an embedding column's.
"""
import tensorflow as tf
from keras.src.mixed_precision import autocast_variable  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.feature_column import feature_column_v2 as fc  # pylint: disable=g-direct-tensorflow-import

from estimator_scale import errors
from estimator_scale.embeddings import sharded

COMBINERS = ("mean", "sqrtn", "sum")
"""`combiner` values of `sharded_embedding_column`, as embedding_column's."""


class ShardedEmbedding(tf.keras.layers.Layer):
  """`tf.keras.layers.Embedding` with its rows sharded over Horovod ranks;
  create it inside `logits` (or model_fn), so each mode's graph has its own.

  Args:
    vocabulary_size: the table's rows (Keras' `input_dim`).
    dimension: the vectors' length (Keras' `output_dim`).
    embeddings_initializer: an initializer or its name (default "uniform").
    compression: "none", or "fp16" (see `sharded_embedding`).
    **kwargs: Keras layer arguments (name, dtype, ...).
  """

  def __init__(self, vocabulary_size, dimension,
               embeddings_initializer="uniform", compression="none",
               **kwargs):
    super().__init__(**kwargs)
    sharded.check_sizes(vocabulary_size, dimension, self.name)
    sharded.check_compression(compression, self.name)
    self.vocabulary_size = vocabulary_size
    self.dimension = dimension
    self.embeddings_initializer = tf.keras.initializers.get(
        embeddings_initializer)
    self.compression = compression

  def build(self, input_shape):
    """See base class."""
    with tf.compat.v1.variable_scope(self.name):
      self.embeddings = sharded.make_table(
          "embeddings", self.vocabulary_size, self.dimension,
          self.embeddings_initializer, self.dtype or tf.float32)
    super().build(input_shape)

  def call(self, ids):  # pylint: disable=arguments-differ
    """See base class."""
    vectors = sharded.lookup(self.embeddings, ids, self.compression)
    return tf.cast(vectors, self.compute_dtype)

  def get_config(self):
    """See base class."""
    return dict(super().get_config(), vocabulary_size=self.vocabulary_size,
                dimension=self.dimension, compression=self.compression,
                embeddings_initializer=tf.keras.initializers.serialize(
                    self.embeddings_initializer))


def sharded_embedding_column(categorical_column, dimension, combiner="mean",
                             initializer=None, max_norm=None,
                             compression="none"):
  """`tf.feature_column.embedding_column` with a sharded table; ids must lie
  in [0, num_buckets) (negative ids and weights <= 0 are dropped).

  Args:
    categorical_column: a categorical column, or a weighted one.
    dimension: the vectors' length.
    combiner: one of `COMBINERS`.
    initializer: as embedding_column's.
    max_norm: if set, each looked-up vector is clipped to this l2 norm.
    compression: "none", or "fp16" (see `sharded_embedding`).

  Returns:
    A dense column.
  """
  name = getattr(categorical_column, "name", repr(categorical_column))
  if combiner not in COMBINERS:
    raise errors.ConfigError(
        f"sharded_embedding_column {name!r}: combiner={combiner!r} is "
        f"unknown; valid: {', '.join(COMBINERS)}")
  sharded.check_compression(compression, name)
  column = tf.feature_column.embedding_column(
      categorical_column, dimension, combiner=combiner,
      initializer=initializer, max_norm=max_norm)
  return _ShardedEmbeddingColumn(*column, compression=compression)


class _ShardedEmbeddingColumn(fc.EmbeddingColumn):
  """An embedding column whose table is made and looked up by `sharded`."""

  def __new__(cls, *fields, compression="none"):
    # Copies (deepcopy) pass the fields alone and restore the rest after.
    column = super().__new__(cls, *fields)
    column.compression = compression
    return column

  def create_state(self, state_manager):
    """See base class: DenseFeatures' table, made by `make_table`."""
    with self._tables():
      super().create_state(state_manager)

  def _old_get_dense_tensor_internal(self, sparse_tensors, weight_collections,
                                     trainable):
    """See base class: input_layer's table, made by `make_table`."""
    with self._tables():
      return super()._old_get_dense_tensor_internal(
          sparse_tensors, weight_collections, trainable)

  def _tables(self):
    """A variable scope in which the column's table comes from `make_table`."""

    def table_getter(getter, name, **kwargs):
      vocabulary_size, dimension = kwargs["shape"]

      def make(full_name, **mine):
        return getter(full_name, **dict(kwargs, **mine))
      return sharded.make_table(name, int(vocabulary_size), int(dimension),
                                kwargs["initializer"], tf.float32, make)
    return tf.compat.v1.variable_scope(
        tf.compat.v1.get_variable_scope(), custom_getter=table_getter,
        auxiliary_name_scope=False)

  def _get_dense_tensor_internal_helper(self, sparse_tensors,
                                        embedding_weights):
    """See base class: the combiner over `sharded.lookup`'s vectors."""
    if isinstance(embedding_weights, autocast_variable.AutoCastVariable):
      # DenseFeatures under a mixed policy wraps its variables; the rows
      # are gathered from the variable itself.
      embedding_weights = embedding_weights._variable  # pylint: disable=protected-access
    return combine(
        lambda ids: sharded.lookup(embedding_weights, ids, self.compression),
        sparse_tensors.id_tensor, sparse_tensors.weight_tensor,
        self.combiner, self.max_norm)


def combine(vectors_of, ids, weights, combiner, max_norm=None,
            raw_ids=False):
  """Combines each example's vectors as `safe_embedding_lookup_sparse` does.

  Args:
    vectors_of: the table's lookup: a vector of ids -> their vectors.
    ids: a SparseTensor of ids, examples along its leading dimensions.
    weights: a SparseTensor of their weights, or None (all 1).
    combiner: one of `COMBINERS`.
    max_norm: if set, each vector is clipped to this l2 norm first.
    raw_ids: whether negative ids are ids (dynamic tables), not "no id".

  Returns:
    [leading dimensions of `ids`..., dimension]; zeros for no ids.
  """
  leading = ids.dense_shape[:-1]
  examples = tf.reduce_prod(leading)
  ids = tf.sparse.reshape(ids, tf.stack([examples, ids.dense_shape[-1]]))
  keep = tf.ones_like(ids.values, tf.bool) if raw_ids else ids.values >= 0
  if weights is not None:
    weights = tf.sparse.reshape(weights, ids.dense_shape)
    keep &= weights.values > 0
    weights = tf.sparse.retain(weights, keep).values
  ids = tf.sparse.retain(ids, keep)
  if weights is None:
    weights = tf.ones_like(ids.values, tf.float32)
  vectors = vectors_of(ids.values)
  if max_norm is not None:
    vectors = tf.clip_by_norm(vectors, max_norm, axes=[1])
  example = ids.indices[:, 0]
  weights = tf.cast(weights, vectors.dtype)
  total = tf.math.unsorted_segment_sum(vectors * weights[:, None], example,
                                       examples)
  if combiner != "sum":
    norm = tf.math.unsorted_segment_sum(
        weights if combiner == "mean" else tf.square(weights), example,
        examples)
    if combiner == "sqrtn":
      norm = tf.sqrt(norm)
    total = tf.math.divide_no_nan(total, norm[:, None])
  return tf.reshape(total, tf.concat([tf.cast(leading, tf.int32),
                                      tf.shape(total)[1:]], 0))

"""Dynamic tables the way models are written: a Keras layer, a feature column.

Both wrap `dynamic.make_table` and `dynamic.lookup`; the column's table
sees raw values (a hashed column's fingerprints, not its buckets), so ids
never share a row.
"""
import tensorflow as tf
from tensorflow.python.feature_column import feature_column_v2 as fc  # pylint: disable=g-direct-tensorflow-import

from estimator_scale import errors
from estimator_scale.embeddings import dynamic
from estimator_scale.embeddings import sharded_layers

_RAW_BUCKETS = (1 << 63) - 1
"""A hashed column's buckets once raw: its fingerprints, whole."""


class DynamicEmbedding(tf.keras.layers.Layer):
  """`tf.keras.layers.Embedding` keyed by raw ids (see `dynamic_embedding`);
  on ps, `embeddings` is the first part's pool, the rest `embedding_parts`.

  Args:
    dimension, capacity, min_count, steps_to_live, eviction: as
      `dynamic_embedding`'s.
    embeddings_initializer: draws admitted rows; None: from each id's hash.
    **kwargs: Keras layer arguments (name, ...).
  """

  def __init__(self, dimension, capacity, min_count=1, steps_to_live=None,
               eviction="lru", embeddings_initializer=None, **kwargs):
    super().__init__(**kwargs)
    self.options = dynamic.Options(dimension, capacity, min_count,
                                   steps_to_live, eviction,
                                   embeddings_initializer)
    dynamic.check_options(self.options, self.name)

  def build(self, input_shape):
    """See base class."""
    with tf.compat.v1.variable_scope(self.name):
      self.table = dynamic.make_table("embeddings", self.options)
    self.embeddings = self.table.pool
    # A Keras model's optimizer trains only what its layers list.
    self.embedding_parts = [part.pool for part in
                            getattr(self.table, "parts", [])[1:]]
    super().build(input_shape)

  def call(self, ids, training=None):  # pylint: disable=arguments-differ
    """See base class."""
    read_only = training is not None and not training
    vectors = dynamic.lookup(self.table, ids,
                             training=False if read_only else None)
    return tf.cast(vectors, self.compute_dtype)

  def get_config(self):
    """See base class."""
    options = self.options
    return dict(super().get_config(), dimension=options.dimension,
                capacity=options.capacity, min_count=options.min_count,
                steps_to_live=options.steps_to_live,
                eviction=options.eviction)


def _raw(categorical_column, name):
  """The categorical column whose ids are the raw values."""
  if isinstance(categorical_column, fc.HashedCategoricalColumn):
    return fc.HashedCategoricalColumn(categorical_column.key, _RAW_BUCKETS,
                                      categorical_column.dtype)
  if isinstance(categorical_column, (fc.IdentityCategoricalColumn,
                                     fc.WeightedCategoricalColumn)):
    return categorical_column
  raise errors.ConfigError(
      f"dynamic_embedding_column {name!r}: a {type(categorical_column).__name__}"
      " has ids of its own making; give categorical_column_with_hash_bucket "
      "or categorical_column_with_identity over the raw ids (or a weighted "
      "one of them)")


def dynamic_embedding_column(categorical_column, dimension, capacity,
                             combiner="mean", min_count=1, steps_to_live=None,
                             eviction="lru", initializer=None, max_norm=None):
  """An embedding column whose table is keyed by the column's raw ids.

  Args:
    categorical_column: `categorical_column_with_hash_bucket` (bucket count
      unused) or `_with_identity` over raw ids, or a weighted one of them.
    dimension, capacity, min_count, steps_to_live, eviction, initializer:
      as `dynamic_embedding`'s.
    combiner: one of "mean", "sqrtn", "sum".
    max_norm: if set, each looked-up vector is clipped to this l2 norm.

  Returns:
    A dense column.
  """
  name = getattr(categorical_column, "name", repr(categorical_column))
  if combiner not in sharded_layers.COMBINERS:
    raise errors.ConfigError(
        f"dynamic_embedding_column {name!r}: combiner={combiner!r} is "
        f"unknown; valid: {', '.join(sharded_layers.COMBINERS)}")
  options = dynamic.Options(dimension, capacity, min_count, steps_to_live,
                            eviction, initializer)
  dynamic.check_options(options, name)
  column = tf.feature_column.embedding_column(
      _raw(categorical_column, name), dimension, combiner=combiner,
      max_norm=max_norm)
  return _DynamicEmbeddingColumn(*column, options=options)


def _existing(variable):
  """A Keras getter that lists `variable`, made already, as the layer's."""
  return lambda **_: variable


class _DynamicEmbeddingColumn(fc.EmbeddingColumn):
  """An embedding column whose table is a `dynamic.Table`."""

  def __new__(cls, *fields, options=None):
    # Copies (deepcopy) pass the fields alone and restore the rest after.
    column = super().__new__(cls, *fields)
    column.options = options
    return column

  def create_state(self, state_manager):
    """See base class: DenseFeatures' table, in a scope per column, made via
    add_weight so Keras lists it (canned estimators train only listed
    variables), without autocast so the optimizer finds the table by pool."""
    layer = state_manager._layer  # pylint: disable=protected-access

    def make_pool(**_):
      with tf.compat.v1.variable_scope(f"{layer.name}/{self.name}"):
        return dynamic.make_table("embedding_weights", self.options).pool
    # Named by column: Keras tracks the weights of a layer by name.
    pool = layer.add_weight(
        name=f"{self.name}/embedding_weights", dtype=tf.float32,
        trainable=True, getter=make_pool, experimental_autocast=False)
    for part in getattr(dynamic.lookup_table_of(pool), "parts", [])[1:]:
      layer.add_weight(
          name=f"{self.name}/embedding_weights/part_{part.ps_part.task}",
          dtype=tf.float32, trainable=True, getter=_existing(part.pool),
          experimental_autocast=False)
    state_manager._cols_to_vars_map[self]["embedding_weights"] = pool  # pylint: disable=protected-access

  def _old_get_dense_tensor_internal(self, sparse_tensors, weight_collections,
                                     trainable):
    """See base class: input_layer's table."""
    with self._tables():
      return super()._old_get_dense_tensor_internal(
          sparse_tensors, weight_collections, trainable)

  def _tables(self):
    """A variable scope in which the column's table is a dynamic one."""

    def table_getter(getter, name, **kwargs):
      def make(full_name, **mine):
        return getter(full_name, **dict(kwargs, **mine))
      # `name` is the full name, as `getter` takes it.
      return dynamic.make_table(name, self.options, make).pool
    return tf.compat.v1.variable_scope(
        tf.compat.v1.get_variable_scope(), custom_getter=table_getter,
        auxiliary_name_scope=False)

  def _get_dense_tensor_internal_helper(self, sparse_tensors,
                                        embedding_weights):
    """See base class: the combiner over the dynamic table's vectors."""
    variable = getattr(embedding_weights, "_variable", embedding_weights)
    table = dynamic.lookup_table_of(variable)
    return sharded_layers.combine(
        lambda ids: dynamic.lookup(table, ids), sparse_tensors.id_tensor,
        sparse_tensors.weight_tensor, self.combiner, self.max_norm,
        raw_ids=True)

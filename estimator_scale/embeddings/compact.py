"""Compact exports: a dynamic table served by the rows worth serving, in
fewer bytes a row.

Rows rarely or long unseen are near their initial values, and a table
trained over many hosts may not fit a serving host. A `CompactExport`
keeps rows seen `min_count` times (recently, with `last_updates`), as
float32, float16 or int8 with a per-row scale (max magnitude / 127);
left-out ids read zeros. Rows are chosen and written from the checkpoint
a block at a time; the size is checked before writing.
"""
import contextlib
import contextvars
import dataclasses
import numbers

from absl import logging
import numpy as np
import tensorflow as tf
from tensorflow.python.ops import variables as tf_variables  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.training.saving import saveable_object_util  # pylint: disable=g-direct-tensorflow-import

from estimator_scale import errors
from estimator_scale.embeddings import saving

DTYPES = ("float32", "float16", "int8")
"""How a compact export stores a row's values."""

_INT8_STEPS = 127


@dataclasses.dataclass(frozen=True)
class CompactExport:
  """What an export keeps of its dynamic tables, and its budget.

  Args:
    min_count: rows looked up fewer times since admission are left out.
    last_updates: rows unseen for this many updates are left out (None).
    dtype: "float32", "float16", or "int8" with a float32 scale per row.
    max_bytes: a larger export (of any model) is refused before it is
      written (None: no budget).
  """
  min_count: int = 1
  last_updates: int | None = None
  dtype: str = "float32"
  max_bytes: int | None = None

  def __post_init__(self):
    for name, low in (("min_count", 1), ("last_updates", 1),
                      ("max_bytes", 1)):
      value = getattr(self, name)
      if value is None and name != "min_count":
        continue
      if (not isinstance(value, numbers.Integral) or isinstance(value, bool)
          or value < low):
        raise errors.ConfigError(
            f"CompactExport: {name}={value!r}; valid: an integer >= {low}"
            + ("" if name == "min_count" else ", or None"))
    if self.dtype not in DTYPES:
      raise errors.ConfigError(
          f"CompactExport: dtype={self.dtype!r}; valid: "
          f"{', '.join(DTYPES)}")

  @property
  def changes_tables(self):
    """Whether it keeps other rows, or other bytes, than a full export."""
    return (self.min_count > 1 or self.last_updates is not None or
            self.dtype != "float32")


@dataclasses.dataclass
class _Export:
  """One export in the making: its CompactExport, sources, served tables."""
  compact: CompactExport
  sources: tuple
  served: list = dataclasses.field(default_factory=list)


_EXPORT = contextvars.ContextVar("estimator_scale_compact_export",
                                 default=None)


@contextlib.contextmanager
def compacting(compact, sources):
  """Within it, dynamic tables are `ServedTable`s of `compact`, read from the
  first of `sources` holding each; `compact` None changes nothing."""
  token = _EXPORT.set(None if compact is None else
                      _Export(compact, tuple(sources)))
  try:
    yield
  finally:
    _EXPORT.reset(token)


def active():
  """The CompactExport of the export being built, or None."""
  export = _EXPORT.get()
  return None if export is None else export.compact


def served_tables():
  """The `ServedTable`s made in the export being built."""
  export = _EXPORT.get()
  return [] if export is None else list(export.served)


class _Reader:
  """Blocks of rows of a checkpoint's tensors, read by slice, never whole."""

  def __init__(self, checkpoint):
    self.index = tf.train.load_checkpoint(checkpoint)
    self.checkpoint = checkpoint
    self.shapes = self.index.get_variable_to_shape_map()
    self.dtypes = self.index.get_variable_to_dtype_map()
    self._graph = tf.Graph()
    self._session = tf.compat.v1.Session(graph=self._graph)
    self._reads = {}

  def close(self):
    self._session.close()

  def read(self, key, first, count):
    """Rows [first, first + count) of tensor `key`."""
    if key not in self._reads:
      with self._graph.as_default():
        spec = tf.compat.v1.placeholder(tf.string, [])
        (values,) = tf.raw_ops.RestoreV2(
            prefix=self.checkpoint, tensor_names=[key],
            shape_and_slices=[spec], dtypes=[self.dtypes[key]])
        self._reads[key] = (spec, values)
    spec, values = self._reads[key]
    return self._session.run(values, {spec: _slice(self.shapes[key], first,
                                                   count)})


def _slice(full_shape, first, count):
  """The slice spec of rows [first, first + count) of a tensor."""
  rest = list(full_shape[1:])
  return tf_variables.Variable.SaveSliceInfo(
      "", list(full_shape), [first] + [0] * len(rest), [count] + rest).spec


def _block_rows(dimension):
  """Rows of float32 of `dimension` in a block."""
  return max(1, saving.BLOCK_BYTES // (4 * max(1, dimension)))


def _holder(sources, name):
  """The first checkpoint of `sources` that holds dynamic table `name`."""
  for source in sources:
    if not tf.io.gfile.exists(source + ".index"):
      continue
    reader = tf.train.load_checkpoint(source)
    if all(reader.has_tensor(f"{name}{suffix}")
           for suffix in ("", "/ids", "/counts", "/last_seen")):
      return source
  raise errors.ConfigError(
      f"compact export: dynamic table {name!r} is in none of "
      f"{', '.join(sources)}; export a checkpoint its training saved")


def _kept_positions(reader, name, compact):
  """The rows of table `name` the export keeps, in order (int64)."""
  capacity, dimension = reader.shapes[name]
  now = None
  if compact.last_updates is not None:
    now = int(reader.index.get_tensor(tf.compat.v1.GraphKeys.GLOBAL_STEP))
  block = _block_rows(dimension)
  kept = []
  for first in range(0, capacity, block):
    count = min(block, capacity - first)
    keep = ((reader.read(f"{name}/ids", first, count) >= 0) &
            (reader.read(f"{name}/counts", first, count) >= compact.min_count))
    if now is not None:
      keep &= (reader.read(f"{name}/last_seen", first, count) >=
               now - compact.last_updates)
    kept.append(first + np.flatnonzero(keep))
  return np.concatenate(kept).astype(np.int64)


class ServedTable:
  """A dynamic table as a compact export serves it (kept ids, rows, scales),
  made from `name`, its `dynamic.Options` and an optional `getter`."""

  def __init__(self, name, options, getter):
    export = _EXPORT.get()
    getter = getter or tf.compat.v1.get_variable
    scope = tf.compat.v1.get_variable_scope().name
    self.name = name if scope in ("", None) or name.startswith(scope + "/") \
        else f"{scope}/{name}"
    self.options, self.trained = options, False
    self.source = _holder(export.sources, self.name)
    reader = _Reader(self.source)
    try:
      self.capacity = reader.shapes[self.name][0]
      self.positions = _kept_positions(reader, self.name, export.compact)
    finally:
      reader.close()
    self.dtype = export.compact.dtype
    kept = len(self.positions)

    def variable(suffix, shape, dtype):
      return getter(f"{name}/{suffix}", shape=shape, dtype=dtype,
                    initializer=tf.compat.v1.zeros_initializer(),
                    collections=None, trainable=False)
    self.ids = variable("served_ids", [kept], tf.int64)
    self.pool = variable("served_rows", [kept, options.dimension],
                         tf.as_dtype(self.dtype))
    self.scales = (variable("served_scales", [kept], tf.float32)
                   if self.dtype == "int8" else None)
    self._index = None
    export.served.append(self)

  def variables(self):
    return [v for v in (self.ids, self.pool, self.scales) if v is not None]

  def lookup(self, keys_, training):
    """Vectors of `keys_` (flat int64), zeros where a row was not kept."""
    del training  # an export only reads
    if self._index is None:
      self._index = tf.lookup.StaticHashTable(
          tf.lookup.KeyValueTensorInitializer(
              self.ids, tf.range(tf.shape(self.ids, out_type=tf.int64)[0])),
          default_value=-1, name=f"{self.name.rpartition('/')[2]}_served")
    rows = self._index.lookup(keys_)
    at = tf.where(rows >= 0)
    taken = tf.gather_nd(rows, at)
    vectors = tf.cast(tf.gather(self.pool, taken), tf.float32)
    if self.scales is not None:
      vectors *= tf.gather(self.scales, taken)[:, tf.newaxis]
    dimension = self.options.dimension
    vectors = tf.scatter_nd(at, vectors, tf.stack(
        [tf.shape(rows, out_type=tf.int64)[0],
         tf.constant(dimension, tf.int64)]))
    vectors.set_shape([keys_.shape[0], dimension])
    return vectors

  def describe(self):
    return (f"dynamic table {self.name}: {len(self.positions):,} of "
            f"{self.capacity:,} rows as {self.dtype}")


def _key(variable):
  """`variable`'s name in a checkpoint."""
  (name,) = saveable_object_util.op_list_to_dict([variable])
  return name


def keys(tables):
  """The checkpoint names of `tables`' variables."""
  return {_key(v) for t in tables for v in t.variables()}


def quantized(rows, dtype):
  """(`rows` stored as `dtype`, their per-row scales or None)."""
  if dtype != "int8":
    return rows.astype(dtype), None
  scales = (np.abs(rows).max(axis=1, initial=0.0) /
            _INT8_STEPS).astype(np.float32)
  steps = np.zeros(rows.shape, np.int8)
  nonzero = scales > 0
  steps[nonzero] = np.clip(np.rint(rows[nonzero] / scales[nonzero, None]),
                           -_INT8_STEPS, _INT8_STEPS)
  return steps, scales


def write(tables, prefix):
  """Writes `tables`' kept rows from their checkpoints to `prefix`-part<k>, a
  block at a time, quantised; returns the parts' prefixes."""
  parts = []
  with tf.Graph().as_default(), tf.compat.v1.Session() as session:
    for table in tables:
      key = {id(v): _key(v) for v in table.variables()}
      reader = _Reader(table.source)
      try:
        parts += _write_table(session, reader, table, key, prefix, parts)
      finally:
        reader.close()
  return parts


def _write_table(session, reader, table, key, prefix, parts):
  """`write` of one table: its parts, numbered after `parts`."""
  positions, dimension = table.positions, table.options.dimension
  kept = len(positions)
  variables = table.variables()
  fed = [tf.compat.v1.placeholder(v.dtype, [None] + v.shape.as_list()[1:])
         for v in variables]
  specs = [tf.compat.v1.placeholder(tf.string, []) for _ in variables]
  part = tf.compat.v1.placeholder(tf.string, [])
  save_op = tf.raw_ops.SaveV2(prefix=part,
                              tensor_names=[key[id(v)] for v in variables],
                              shape_and_slices=specs, tensors=fed)
  made = []

  def save(values, done):
    feed = {part: f"{prefix}-part{len(parts) + len(made)}"}
    for variable, placeholder, spec, value in zip(variables, fed, specs,
                                                   values):
      feed[placeholder] = value
      feed[spec] = "" if kept == 0 else _slice(
          [kept] + variable.shape.as_list()[1:], done, len(value))
    made.append(feed[part])
    session.run(save_op, feed)

  if kept == 0:
    save(_values(table, np.zeros([0], np.int64),
                 np.zeros([0, dimension], np.float32)), 0)
    return made
  block = _block_rows(dimension)
  done = 0
  for first in range(0, table.capacity, block):
    count = min(block, table.capacity - first)
    end = int(np.searchsorted(positions, first + count))
    if end == done:
      continue
    inside = positions[done:end] - first
    ids = reader.read(f"{table.name}/ids", first, count)[inside]
    rows = reader.read(table.name, first, count)[inside]
    save(_values(table, ids, rows), done)
    done = end
  return made


def _values(table, ids, rows):
  """Values of `table.variables()` for kept `ids` and float32 `rows`."""
  stored, scales = quantized(rows, table.dtype)
  return [ids, stored] + ([] if table.scales is None else [scales])


def variable_bytes(variables):
  """Bytes `variables` take in a checkpoint (unknown shapes count 0)."""
  return sum((v.shape.num_elements() or 0) * v.dtype.size for v in variables)


def check_size(size, checkpoint, tables):
  """Logs the export's size; ConfigError when above the budget."""
  compact = active()
  if len(tables) > 3:  # one line whatever the model
    dtype = tables[0].dtype
    described = (f"{len(tables)} dynamic tables: "
                 f"{sum(len(t.positions) for t in tables):,} of "
                 f"{sum(t.capacity for t in tables):,} rows as {dtype}")
  else:
    described = "; ".join(t.describe() for t in tables)
  logging.info("export of %s: %s bytes (%.1f MiB) of variables to write%s",
               checkpoint, f"{size:,}", size / 2**20,
               f" ({described})" if described else "")
  if compact is None or compact.max_bytes is None or size <= compact.max_bytes:
    return
  raise errors.ConfigError(
      f"export of {checkpoint}: its variables take {size:,} bytes, above "
      f"max_bytes={compact.max_bytes:,} (--export_max_bytes); keep fewer "
      "rows of its dynamic tables (min_count, last_updates: "
      "--export_min_count, --export_last_updates) or store them in fewer "
      "bytes (dtype float16 or int8: --export_dtype)")

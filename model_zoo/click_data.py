r"""Click logs of Criteo's shape, made from a seed, with a planted model.

Criteo's display-advertising logs have a click label, 13 numeric columns
(counts, heavy-tailed, sometimes missing) and 26 categorical columns whose
values are hashed ids: a few ids are very frequent, most are rare. Here the
counts are log-normal, and each categorical column draws ranks from a Zipf
law over its own vocabulary (by default 3 to 30,000 values; `criteo` gives
the 26 vocabularies of Criteo's 1 TB logs, 178 million ids in all) and
writes them as 31-bit hashes, as Criteo writes 32-bit ones; some values
are missing.

The label comes from a planted logistic model: the click's log-odds add up
a weight per log-count of six numeric columns, an effect per id of ten
categorical columns, and an effect per pair of ids of two more columns that
alone carry nothing (what a crossed column learns and a sum of per-column
effects cannot). A column draws at most `EFFECT_ROWS` effects (`PAIR_ROWS`
per side of the pair); an id past them takes the effect its hash picks, so
every id still has its own fixed effect and the frequent ones, which a model
can learn, are all distinct. The probabilities are known, so the best AUC any model can
reach on the eval split is known too (`planted_auc`): no model ranks better
than the probabilities the labels were drawn from.

With `raw_ids`, ids are what a log without a vocabulary holds: every
column but the crossed pair writes each rank as a 63-bit id (a fixed
bijective mix of column and rank, `raw_id`, so nothing is stored), and each
id of an informative column has its own effect, drawn from its hash: no id
shares an effect with another, so a table where ids share a row pays for
it in AUC. `RAW_VOCABULARY` gives those columns 2^40 ranks each and the
crossed pair its default vocabularies.

Everything follows from the seed; nothing is downloaded.
`tools/click_logs.py` writes the TFRecords and prints their globs and the
planted AUC.
"""
import hashlib
import os
import re

import numpy as np

from model_zoo import generated_data

NUMERIC = tuple(f"I{i}" for i in range(1, 14))
CATEGORICAL = tuple(f"C{i}" for i in range(1, 27))
LABEL = "label"
VOCABULARY = tuple(int(v) for v in np.round(np.geomspace(3, 30000, 26)))
"""Distinct ids per categorical column, C1 ... C26, by default."""
PRESETS = {
    "default": VOCABULARY,
    "criteo": (45833188, 36746, 17245, 7413, 20243, 3, 7114, 1441, 62,
               29275261, 1572176, 345138, 10, 2209, 11267, 128, 4, 974, 14,
               48937457, 11316796, 40094537, 452104, 12606, 104, 35),
}
"""Named vocabularies; `criteo`: the distinct values per column of Criteo's
1 TB click logs (the MLPerf recommendation benchmark's data)."""
EFFECT_ROWS = 1 << 16
PAIR_ROWS = 64
CROSSED = ("C3", "C5")
"""The pair whose ids act only together (small vocabularies: 6 x 13)."""
RAW_VOCABULARY = tuple(VOCABULARY[CATEGORICAL.index(name)] if name in
                       CROSSED else 1 << 40 for name in CATEGORICAL)
"""The vocabulary of `raw_ids` by default: ranks as large as a raw id
holds, the crossed pair's as by default."""
INFORMATIVE_NUMERIC = NUMERIC[:6]
INFORMATIVE_CATEGORICAL = ("C1", "C2", "C4", "C7", "C10", "C13", "C16", "C19",
                           "C22", "C25")
"""Columns with an effect per id, over the whole range of vocabularies."""
ZIPF_EXPONENT = 1.2
_EXACT_ZIPF_ROWS = 1 << 16
"""Up to this vocabulary, ranks are drawn from the table of every rank's
probability; above it, from numpy's unbounded Zipf law, redrawn where past
the vocabulary (no table as large as the vocabulary)."""
MISSING_NUMERIC = 0.1
MISSING_CATEGORICAL = 0.05
CLICK_RATE = 0.25
"""About Criteo's share of clicks (Kaggle set: 25.6 %)."""
SIZES = {"train": 60000, "eval": 5000}
SHARDS = {"train": 4, "eval": 2}
VERSION = 1
"""Bump when the generator changes, so cached files are not reused."""


def vocabulary_sizes(text):
  """The 26 vocabularies `text` names: a preset, or sizes joined by ',' or
  ':' (':' inside `--hparams`); "" is the default."""
  text = text.strip() or "default"
  if text in PRESETS:
    return PRESETS[text]
  try:
    sizes = tuple(int(part) for part in re.split(r"[,:]", text))
  except ValueError:
    sizes = ()
  if len(sizes) != len(CATEGORICAL) or min(sizes) < 1:
    raise ValueError(
        f"vocabulary_sizes={text!r}: expected a preset "
        f"({', '.join(sorted(PRESETS))}) or {len(CATEGORICAL)} sizes >= 1, "
        "one per categorical column C1..C26, joined by ',' or ':'")
  return sizes


def _check_exponent(zipf_exponent):
  if not zipf_exponent > 1.0:
    raise ValueError(f"zipf_exponent={zipf_exponent!r}: must be > 1 (a Zipf "
                     "law P(rank r) ~ r^-exponent; real click logs: 1.0-1.5)")


class _Planted:
  """The planted model's parameters, drawn from the seed."""

  def __init__(self, seed, vocabulary, zipf_exponent, raw_ids=False):
    self.vocabulary = vocabulary
    self.zipf_exponent = zipf_exponent
    self.raw_ids = raw_ids
    rng = np.random.default_rng([seed, 0])
    self.count_mean = rng.uniform(0.0, 4.0, len(NUMERIC))
    self.count_sigma = rng.uniform(0.5, 1.5, len(NUMERIC))
    self.numeric_weights = {name: rng.normal(0.0, 0.5)
                            for name in INFORMATIVE_NUMERIC}
    self.id_effects = {
        name: rng.normal(0.0, 0.7, min(vocabulary[CATEGORICAL.index(name)],
                                       EFFECT_ROWS))
        for name in INFORMATIVE_CATEGORICAL}
    sizes = [min(vocabulary[CATEGORICAL.index(name)], PAIR_ROWS)
             for name in CROSSED]
    self.pair_effects = rng.normal(0.0, 1.0, sizes)
    # The bias that makes about CLICK_RATE of the examples clicks.
    columns = _draw_columns(self, np.random.default_rng([seed, 3]), 20000)
    logits = self.logits(*columns)
    low, high = -10.0, 10.0
    for _ in range(50):
      self.bias = (low + high) / 2
      if _sigmoid(logits + self.bias).mean() > CLICK_RATE:
        high = self.bias
      else:
        low = self.bias

  def logits(self, counts, ranks, bias=0.0):
    """Log-odds without the bias, from counts and ranks (-1: missing)."""
    total = np.full(len(counts[NUMERIC[0]]), bias)
    for name, weight in self.numeric_weights.items():
      j = NUMERIC.index(name)
      standard = (np.log1p(np.maximum(counts[name], 0.0)) -
                  self.count_mean[j]) / self.count_sigma[j]
      total += weight * np.where(counts[name] < 0, 0.0, standard)
    for name, effects in self.id_effects.items():
      rank = ranks[name]
      if self.raw_ids:
        own = RAW_EFFECT_SIGMA * _hashed_normal(raw_id(name, rank))
      else:
        own = effects[_row(name, rank, len(effects))]
      total += np.where(rank < 0, 0.0, own)
    first, second = (ranks[name] for name in CROSSED)
    both = (first >= 0) & (second >= 0)
    rows = [_row(name, ranks[name], size)
            for name, size in zip(CROSSED, self.pair_effects.shape)]
    total += np.where(both, self.pair_effects[rows[0], rows[1]], 0.0)
    return total


def _row(column, ranks, rows):
  """Each rank's row of a table of `rows` effects: its own below `rows`,
  the one its hash picks above (a missing rank's, -1, is never read)."""
  ranks = np.maximum(ranks, 0)
  return np.where(ranks < rows, ranks, hashed_id(column, ranks) % rows)


RAW_EFFECT_SIGMA = 0.7
_MASK63 = np.uint64((1 << 63) - 1)
RANK_BITS = 40
"""A raw id mixes (column + 1) << RANK_BITS plus the rank: ranks below
2^40, so every column's ids are distinct from every other's."""


def raw_id(column, ranks):
  """The 63-bit id a rank of a column is written as with `raw_ids`: xor-
  shifts and odd multiplications modulo 2^63, each a bijection of 63-bit
  integers, so distinct (column, rank) pairs never share an id."""
  x = (np.uint64(CATEGORICAL.index(column) + 1) << np.uint64(RANK_BITS)) + (
      np.maximum(ranks, 0).astype(np.uint64))
  x = x ^ (x >> np.uint64(31))
  x = (x * np.uint64(0xBF58476D1CE4E5B9)) & _MASK63
  x = x ^ (x >> np.uint64(29))
  x = (x * np.uint64(0x94D049BB133111EB)) & _MASK63
  x = x ^ (x >> np.uint64(32))
  return x.astype(np.int64)


def _hashed_normal(ids):
  """A standard normal value per id, a function of the id alone (Box-Muller
  on two 32-bit halves of another mix of it)."""
  x = ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
  x = (x ^ (x >> np.uint64(32))) * np.uint64(0xD6E8FEB86659FD93)
  x = x ^ (x >> np.uint64(29))
  low = ((x & np.uint64(0xFFFFFFFF)).astype(np.float64) + 0.5) / 2.0**32
  high = ((x >> np.uint64(32)).astype(np.float64) + 0.5) / 2.0**32
  return np.sqrt(-2.0 * np.log(low)) * np.cos(2.0 * np.pi * high)


def _sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def _zipf_ranks(rng, vocabulary, count, exponent):
  """Ranks 0..vocabulary-1 with P(r) proportional to (r + 1)^-exponent."""
  if vocabulary <= _EXACT_ZIPF_ROWS:
    weights = np.arange(1, vocabulary + 1, dtype=np.float64) ** -exponent
    return rng.choice(vocabulary, size=count, p=weights / weights.sum())
  ranks = rng.zipf(exponent, count) - 1
  past = np.flatnonzero(ranks >= vocabulary)
  while past.size:  # the law conditioned on rank < vocabulary
    ranks[past] = rng.zipf(exponent, past.size) - 1
    past = past[ranks[past] >= vocabulary]
  return ranks


def _draw_columns(planted, rng, count):
  """({numeric: counts, -1 missing}, {categorical: ranks, -1 missing})."""
  counts, ranks = {}, {}
  for j, name in enumerate(NUMERIC):
    values = np.floor(np.exp(rng.normal(planted.count_mean[j],
                                        planted.count_sigma[j], count)))
    counts[name] = np.where(rng.random(count) < MISSING_NUMERIC, -1.0, values)
  for name, vocabulary in zip(CATEGORICAL, planted.vocabulary):
    drawn = _zipf_ranks(rng, vocabulary, count, planted.zipf_exponent)
    ranks[name] = np.where(rng.random(count) < MISSING_CATEGORICAL, -1, drawn)
  return counts, ranks


def hashed_id(column, ranks):
  """The id a rank of a column is written as: a 31-bit hash, like Criteo's
  anonymised values (splitmix64's mixing of column and rank)."""
  x = (np.uint64(CATEGORICAL.index(column) + 1) << np.uint64(32)) + (
      ranks.astype(np.uint64))
  x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
  x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
  x = x ^ (x >> np.uint64(31))
  return (x & np.uint64(0x7FFFFFFF)).astype(np.int64)


def generate(split, seed=0, count=None, vocabulary=VOCABULARY,
             zipf_exponent=ZIPF_EXPONENT, raw_ids=False):
  """One split as arrays.

  Args:
    split: "train" or "eval".
    seed: everything follows from it.
    count: examples (default `SIZES[split]`).
    vocabulary: distinct ids of each categorical column (`vocabulary_sizes`).
    zipf_exponent: of the ranks' Zipf law, > 1.
    raw_ids: 63-bit ids with an effect each (the module's docstring).

  Returns:
    (features, labels, probabilities): features maps each numeric column
    to float32 counts and each categorical column to int64 hashed ids, or
    raw ones (NaN and -1 where missing); labels are 0/1 clicks drawn with the planted
    probabilities.
  """
  _check_exponent(zipf_exponent)
  planted = _Planted(seed, tuple(vocabulary), zipf_exponent, raw_ids)
  index = {"train": 1, "eval": 2}[split]
  rng = np.random.default_rng([seed, index])
  return _draw(planted, rng, count or SIZES[split])


def generate_day(day, count, seed=0, vocabulary=VOCABULARY,
                 zipf_exponent=ZIPF_EXPONENT, raw_ids=False):
  """One day of logs: `generate`'s arrays for `day` (a datetime.date).

  Every day shares the planted model of `seed`, so what a model learns on
  one day holds on the next, and draws its own examples from a stream of
  its date, so a day is the same whichever days are written beside it.
  """
  _check_exponent(zipf_exponent)
  planted = _Planted(seed, tuple(vocabulary), zipf_exponent, raw_ids)
  rng = np.random.default_rng([seed, 4, day.toordinal()])
  return _draw(planted, rng, count)


def _draw(planted, rng, count):
  """(features, labels, probabilities) of `count` examples; `generate`."""
  counts, ranks = _draw_columns(planted, rng, count)
  probabilities = _sigmoid(planted.logits(counts, ranks, planted.bias))
  labels = (rng.random(count) < probabilities).astype(np.int64)
  features = {name: np.where(values < 0, np.nan, values).astype(np.float32)
              for name, values in counts.items()}
  for name, rank in ranks.items():
    write = raw_id if planted.raw_ids and name not in CROSSED else hashed_id
    features[name] = np.where(rank < 0, -1, write(name, rank))
  return features, labels, probabilities


def auc(labels, scores):
  """The area under the ROC curve (ties count one half)."""
  from sklearn import metrics  # pylint: disable=g-import-not-at-top
  return float(metrics.roc_auc_score(labels, scores))


def planted_auc(seed=0, split="eval", vocabulary=VOCABULARY,
                zipf_exponent=ZIPF_EXPONENT, raw_ids=False):
  """The AUC of the planted probabilities: the best any model can reach."""
  _, labels, probabilities = generate(split, seed, None, vocabulary,
                                      zipf_exponent, raw_ids)
  return auc(labels, probabilities)


def example(features, label, i):
  """Row i as a tf.train.Example; a missing value is left out."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  feature = {LABEL: tf.train.Feature(
      int64_list=tf.train.Int64List(value=[int(label)]))}
  for name in NUMERIC:
    value = features[name][i]
    if not np.isnan(value):
      feature[name] = tf.train.Feature(
          float_list=tf.train.FloatList(value=[value]))
  for name in CATEGORICAL:
    value = features[name][i]
    if value >= 0:
      feature[name] = tf.train.Feature(
          int64_list=tf.train.Int64List(value=[value]))
  return tf.train.Example(features=tf.train.Features(feature=feature))


ROWS_PER_SHARD = 250_000
"""A larger split is written in more shards, so readers interleave them."""


def write_split(split, directory, seed=0, vocabulary=VOCABULARY,
                zipf_exponent=ZIPF_EXPONENT, raw_ids=False, count=None):
  """Writes a split (`count` examples; default `SIZES[split]`) as
  round-robin TFRecord shards; returns their paths."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  features, labels, _ = generate(split, seed, count, vocabulary,
                                 zipf_exponent, raw_ids)
  shards = max(SHARDS[split], len(labels) // ROWS_PER_SHARD)
  paths = [os.path.join(directory, f"{split}-{i:05d}-of-{shards:05d}.tfrecord")
           for i in range(shards)]
  writers = [tf.io.TFRecordWriter(path) for path in paths]
  for i, label in enumerate(labels):
    writers[i % shards].write(example(features, label, i).SerializeToString())
  for writer in writers:
    writer.close()
  return paths


def tfrecord_pattern(split, seed=0, data_dir=None, vocabulary=VOCABULARY,
                     zipf_exponent=ZIPF_EXPONENT, raw_ids=False,
                     train_rows=None, eval_rows=None):
  """The glob of a split's shards, writing both splits first if missing
  (once, by one process; generated_data.folder says where).

  Data of other vocabularies or exponents than the default's lives in a
  directory named by a digest of them; `train_rows` and `eval_rows`
  (default `SIZES`) in one named by their counts.
  """
  _check_exponent(zipf_exponent)
  name = f"clicks-v{VERSION}-seed{seed}"
  if (tuple(vocabulary), zipf_exponent) != (VOCABULARY, ZIPF_EXPONENT):
    name += "-" + hashlib.sha1(
        repr((tuple(vocabulary), zipf_exponent)).encode()).hexdigest()[:12]
  if raw_ids:
    name += "-raw"
  if train_rows:
    name += f"-train{train_rows}"
  if eval_rows:
    name += f"-eval{eval_rows}"
  counts = {"train": train_rows, "eval": eval_rows}

  def write(folder):
    for split_name in SIZES:
      write_split(split_name, folder, seed, vocabulary, zipf_exponent,
                  raw_ids, counts[split_name])

  root = generated_data.folder(name, write, data_dir)
  return os.path.join(root, f"{split}-*.tfrecord")


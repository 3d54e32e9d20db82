"""The bench's click logs: raw 63-bit ids, written once as .npy files.

Every worker of a run trains on the same examples, so the parent draws them
(click_data with `raw_ids`) and the workers map the files: a fresh process
then starts in seconds, not in the minute the generator takes.
"""
import hashlib
import os
import tempfile

import numpy as np

from model_zoo import click_data

COLUMNS = tuple(name for name in click_data.INFORMATIVE_CATEGORICAL)
"""The columns the bench trains on: those with an effect per id (none of
them is a crossed one, so all hold raw ids)."""
LABEL = click_data.LABEL


def folder(train, evaluation, zipf_exponent, seed=0):
  """Where the arrays of these sizes live (under the temp dir)."""
  key = hashlib.sha1(repr((click_data.VERSION, train, evaluation,
                           zipf_exponent, seed)).encode()).hexdigest()[:12]
  return os.path.join(tempfile.gettempdir(), f"estimator_scale_dynamic-{key}")


def prepare(train, evaluation, zipf_exponent, seed=0):
  """Draws both splits if missing; returns (folder, distinct ids over both
  splits' bench columns)."""
  root = folder(train, evaluation, zipf_exponent, seed)
  distinct_path = os.path.join(root, "distinct.npy")
  if not os.path.exists(distinct_path):
    os.makedirs(root, exist_ok=True)
    seen = []
    for split, count in (("train", train), ("eval", evaluation)):
      features, labels, _ = click_data.generate(
          split, seed, count, click_data.RAW_VOCABULARY, zipf_exponent,
          raw_ids=True)
      for name in COLUMNS:
        np.save(os.path.join(root, f"{split}-{name}.npy"), features[name])
        seen.append(features[name][features[name] >= 0])
      np.save(os.path.join(root, f"{split}-{LABEL}.npy"), labels)
    np.save(distinct_path, np.int64(len(np.unique(np.concatenate(seen)))))
  return root, int(np.load(distinct_path))


def load(root, split):
  """({column: int64 ids, -1 missing}, labels) of a split, memory-mapped."""
  features = {name: np.load(os.path.join(root, f"{split}-{name}.npy"),
                            mmap_mode="r") for name in COLUMNS}
  return features, np.load(os.path.join(root, f"{split}-{LABEL}.npy"))


def seen_twice(root):
  """{"distinct": ..., "seen_twice": ...}: the training split's ids per
  column, and those of them drawn at least twice (what min_count=2 admits,
  but for the sketch's shared counters), each the mean over the columns."""
  features, _ = load(root, "train")
  distinct, twice = [], []
  for ids in features.values():
    _, counts = np.unique(np.asarray(ids)[np.asarray(ids) >= 0],
                          return_counts=True)
    distinct.append(len(counts))
    twice.append(int(np.count_nonzero(counts >= 2)))
  return {"distinct": int(np.mean(distinct)), "seen_twice": int(np.mean(twice))}

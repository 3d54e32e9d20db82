"""Writes an extracted data set's splits into place, all or nothing."""
import os
import shutil
import tempfile

import estimator_scale as es


def write(root, splits, shards, notice):
  """Writes each split as TFRecord shards into `root`, with a NOTICE.

  The files go into a scratch folder beside `root`, which is renamed into
  place once complete (a `DONE` file marks it), so a reader never sees half
  a data set and an interrupted run leaves nothing behind.

  Args:
    root: the data set's folder (replaced if it exists).
    splits: {split name: (features, labels)}.
    shards: {split name: number of shard files}.
    notice: the data's source and terms, written as NOTICE.

  Returns:
    {split name: rows written}.
  """
  parent = os.path.dirname(root)
  os.makedirs(parent, exist_ok=True)
  scratch = tempfile.mkdtemp(prefix=os.path.basename(root) + "-", dir=parent)
  try:
    for name, (features, labels) in splits.items():
      es.inputs.write_tfrecord_shards(features, labels, scratch, shards[name],
                                      prefix=name)
    with open(os.path.join(scratch, "NOTICE"), "w", encoding="utf-8") as f:
      f.write(notice + "\n")
    with open(os.path.join(scratch, "DONE"), "w", encoding="utf-8") as f:
      f.write("".join(f"{name} {len(labels)}\n"
                      for name, (_, labels) in splits.items()))
    shutil.rmtree(root, ignore_errors=True)
    os.rename(scratch, root)
  except BaseException:
    shutil.rmtree(scratch, ignore_errors=True)
    raise
  return {name: len(labels) for name, (_, labels) in splits.items()}

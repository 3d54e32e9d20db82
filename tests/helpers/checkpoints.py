"""Checkpoints in a model_dir, as the tests look at them."""
import os
import re

import tensorflow as tf

FRESH_LINE = "starting it fresh"
"""What a resumed run logs for state its checkpoint lacks."""


def checkpoint_step(model_dir):
  """The latest checkpoint's step in `model_dir`, 0 while it has none.

  Read from TensorFlow's `checkpoint` state file, so that polling it while a
  job writes checkpoints costs no checkpoint read. 0 is also what training
  resumes from in an empty model_dir.
  """
  try:
    with open(os.path.join(model_dir, "checkpoint"), encoding="utf-8") as f:
      latest = f.readline()
  except FileNotFoundError:
    return 0
  return int(re.search(r"ckpt-(\d+)", latest).group(1))


def write_checkpoint_state(model_dir, step):
  """Makes `model_dir` (a pathlib.Path) look as if it held a checkpoint of
  `step`: TensorFlow's state file alone, which is all the launcher reads."""
  model_dir.mkdir(exist_ok=True)
  (model_dir / "checkpoint").write_text(
      f'model_checkpoint_path: "model.ckpt-{step}"\n'
      f'all_model_checkpoint_paths: "model.ckpt-{step}"\n')


def checkpoint_values(model_dir):
  """{variable name: value} of the latest checkpoint in `model_dir`."""
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(model_dir)))
  return {name: reader.get_tensor(name)
          for name in reader.get_variable_to_shape_map()}

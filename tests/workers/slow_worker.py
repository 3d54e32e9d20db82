"""digits_mlp with one worker made slow, for the straggler tests.

`SLOW_WORKER=<i>` makes worker i (Horovod rank i, or TF_CONFIG worker task
i) sleep `SLOW_WORKER_SECONDS` (default 0.05) in every micro-batch's forward
pass, inside the graph, so each of its updates computes that much longer
while the others wait for it in the exchange. With `SLOW_WORKER_PART=input`
it sleeps in its input's parse of every batch instead, so its updates wait
that long for their batch.
"""
import json
import os
import time

import tensorflow as tf

import estimator_scale as es
from model_zoo import digits


def _this_worker():
  """This process's worker index, as horovodrun or TF_CONFIG says (0 for
  one process alone)."""
  if "HOROVOD_RANK" in os.environ:
    return int(os.environ["HOROVOD_RANK"])
  if "TF_CONFIG" not in os.environ:
    return 0
  task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
  return task.get("index", 0) if task.get("type") == "worker" else None


def _pause(image):
  time.sleep(float(os.environ.get("SLOW_WORKER_SECONDS", "0.05")))
  return image


def _slow_part():
  """"compute" or "input" where this process is the slow worker, else None."""
  slow = os.environ.get("SLOW_WORKER")
  if slow is None or int(slow) != _this_worker():
    return None
  return os.environ.get("SLOW_WORKER_PART", "compute")


def _paused_parse(input_fn):
  """`input_fn`, whose batches each wait one pause after the prefetch, as a
  parse that cannot keep up holds up every batch."""

  def parse(*element):
    done = tf.py_function(lambda: _pause(0.0), [], tf.float32)
    with tf.control_dependencies([done]):
      return tf.nest.map_structure(tf.identity, element)

  def paused(params=None, input_context=None, config=None):
    return input_fn(params=params, input_context=input_context,
                    config=config).map(parse)
  return paused


@es.register
class SlowDigitsMLP(digits.DigitsMLP):
  """digits_mlp whose SLOW_WORKER computes, or reads, slowly."""

  name = "slow_digits_mlp"

  def input_fn(self, mode, global_batch_size, params, topology=None,
               accumulation_steps=1):
    """See base class."""
    input_fn = super().input_fn(mode, global_batch_size, params, topology,
                                accumulation_steps)
    if mode == tf.estimator.ModeKeys.TRAIN and _slow_part() == "input":
      return _paused_parse(input_fn)
    return input_fn

  def logits(self, features, training, params):
    """See base class."""
    if training and _slow_part() == "compute":
      image = tf.numpy_function(_pause, [features["image"]], tf.float32)
      image.set_shape(features["image"].shape)
      features = dict(features, image=image)
    return super().logits(features, training, params)

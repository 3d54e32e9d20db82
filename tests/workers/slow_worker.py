"""digits_mlp with one worker made slow, for the straggler tests.

`SLOW_WORKER=<i>` makes worker i (Horovod rank i, or TF_CONFIG worker task
i) sleep `SLOW_WORKER_SECONDS` (default 0.05) in every micro-batch's forward
pass, inside the graph, so each of its updates computes that much longer
while the others wait for it in the exchange.
"""
import json
import os
import time

import tensorflow as tf

import estimator_scale as es
from model_zoo import digits


def _this_worker():
  """This process's worker index, as horovodrun or TF_CONFIG says."""
  if "HOROVOD_RANK" in os.environ:
    return int(os.environ["HOROVOD_RANK"])
  task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
  return task.get("index", 0) if task.get("type") == "worker" else None


def _pause(image):
  time.sleep(float(os.environ.get("SLOW_WORKER_SECONDS", "0.05")))
  return image


@es.register
class SlowDigitsMLP(digits.DigitsMLP):
  """digits_mlp whose SLOW_WORKER computes slowly."""

  name = "slow_digits_mlp"

  def logits(self, features, training, params):
    """See base class."""
    slow = os.environ.get("SLOW_WORKER")
    if slow is not None and training and int(slow) == _this_worker():
      image = tf.numpy_function(_pause, [features["image"]], tf.float32)
      image.set_shape(features["image"].shape)
      features = dict(features, image=image)
    return super().logits(features, training, params)

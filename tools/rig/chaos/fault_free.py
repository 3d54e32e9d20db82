"""The run a chaos run is judged against: the same worker, data, seed and
global batch, trained in one process without a fault to the step the chaos
job's last checkpoint holds.

Every backend the driver runs but the asynchronous one trains
synchronously from a fixed input order, and every restart resumes from a
complete checkpoint and trains what followed it again once, so its final
model should be the fault-free one but for the order of floating-point
sums; the comparison says how far it is, in weights and on every example.
"""
import os
import subprocess

from tests.helpers.processes import ROOT
from tools.rig.chaos import core

WEIGHTS = ("model/hidden/kernel", "model/hidden/bias", "model/out/kernel",
           "model/out/bias")
"""The worker's network (`tests.workers.tiny_models.TinyMLP`)."""

def _weights(model_dir):
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  reader = tf.train.load_checkpoint(model_dir)
  return ({n: reader.get_tensor(n) for n in WEIGHTS},
          int(reader.get_tensor("global_step")))


def _scores(weights, features, labels):
  """Mean cross-entropy and accuracy of `weights` on every example."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  hidden = np.tanh(features["x"] @ weights["model/hidden/kernel"] +
                   weights["model/hidden/bias"])
  logits = hidden @ weights["model/out/kernel"] + weights["model/out/bias"]
  logits = logits - logits.max(axis=1, keepdims=True)
  log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
  return {"loss": float(-log_p[np.arange(len(labels)), labels].mean()),
          "accuracy": float((logits.argmax(axis=1) == labels).mean())}


def compare(work_dir, global_batch):
  """{"step", "max_abs_diff", "chaos": {loss, accuracy}, "fault_free":
  ...}: the chaos job's last checkpoint in `work_dir` against a fault-free
  run trained to its step at `global_batch` examples an update."""
  # pylint: disable=import-outside-toplevel
  import numpy as np
  from tests.workers.tiny_models import generated_data
  chaos, step = _weights(os.path.join(work_dir, "model"))
  free_dir = os.path.join(work_dir, "fault_free")
  argv = [*core.WORKER, f"--examples={core.EXAMPLES}",
          f"--global_batch_size={global_batch}", f"--max_steps={step}",
          f"--model_dir={free_dir}",
          f"--out_dir={os.path.join(work_dir, 'fault_free_ids')}",
          "--run=fault_free"]
  proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True,
                        check=False)
  if proc.returncode != 0:
    raise RuntimeError(f"the fault-free run failed: {proc.stderr[-2000:]}")
  free, _ = _weights(free_dir)
  _, features, labels = generated_data("mlp", core.EXAMPLES)
  return {"step": step,
          "max_abs_diff": max(float(np.abs(chaos[n] - free[n]).max())
                              for n in WEIGHTS),
          "chaos": _scores(chaos, features, labels),
          "fault_free": _scores(free, features, labels)}

"""The run a chaos run is judged against: the same worker, data, seed and
global batch, trained in one process without a fault to the step the chaos
job's last checkpoint holds.

Every backend the driver runs but the asynchronous one trains
synchronously from a fixed input order (elastic Horovod where it holds the
global batch whatever its ranks), and every restart resumes from a
complete checkpoint and trains what followed it again once, so its final
model should be the fault-free one but for the order of floating-point
sums; the comparison says how far it is, in weights and in what the model
is for: the MLP's loss and accuracy on its examples, the click model's AUC
on clicks it never trained on.
"""
import os
import subprocess

from tests.helpers.processes import ROOT
from tools.rig.chaos import core

HELD_OUT = 20000
"""Clicks of the eval split the click models' AUC is measured on."""


def _weights(model_dir):
  """({name: value} of the network's float variables, the checkpoint's
  step): a table split over parameter servers comes back whole from its
  slices, one sharded over Horovod ranks from the merged checkpoint of the
  step beside it."""
  # pylint: disable=import-outside-toplevel
  import tensorflow as tf
  from estimator_scale.embeddings import shard_checkpoints
  checkpoint = tf.train.latest_checkpoint(model_dir)
  readers = [tf.train.load_checkpoint(path) for path in (
      checkpoint, shard_checkpoints.merged_checkpoint(checkpoint))
             if tf.io.gfile.exists(path + ".index")]
  weights = {n: reader.get_tensor(n) for reader in readers
             for n, dtype in reader.get_variable_to_dtype_map().items()
             if n.startswith("model/") and dtype.is_floating}
  return weights, int(readers[0].get_tensor("global_step"))


def _mlp_scores(weights, examples):
  """Mean cross-entropy and accuracy of the MLP on every example."""
  # pylint: disable=import-outside-toplevel
  import numpy as np
  from tests.workers.tiny_models import generated_data
  _, features, labels = generated_data("mlp", examples)
  hidden = np.tanh(features["x"] @ weights["model/hidden/kernel"] +
                   weights["model/hidden/bias"])
  logits = hidden @ weights["model/out/kernel"] + weights["model/out/bias"]
  logits = logits - logits.max(axis=1, keepdims=True)
  log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
  return {"loss": float(-log_p[np.arange(len(labels)), labels].mean()),
          "accuracy": float((logits.argmax(axis=1) == labels).mean())}


def _click_scores(model_dir):
  """AUC and mean log loss of the click model in `model_dir` on HELD_OUT
  clicks of the eval split, predicted in one process."""
  # pylint: disable=import-outside-toplevel
  import numpy as np
  import tensorflow as tf
  import estimator_scale as es
  from model_zoo import click_data
  from tests.workers import tiny_models
  features, labels = tiny_models.click_arrays("eval", HELD_OUT)
  estimator = es.make_estimator(tiny_models.ClickTables(),
                                model_dir=model_dir, distribution="none")
  scores = np.array([p["logistic"][0] for p in estimator.predict(
      lambda: tf.data.Dataset.from_tensor_slices(features).batch(1000))])
  clipped = np.clip(scores, 1e-7, 1 - 1e-7)
  return {"auc": click_data.auc(labels, scores),
          "loss": float(-np.mean(labels * np.log(clipped) +
                                 (1 - labels) * np.log(1 - clipped)))}


def compare(work_dir, global_batch, case="mlp"):
  """{"step", "max_abs_diff", "chaos": scores, "fault_free": scores}: the
  chaos job's last checkpoint in `work_dir` against a fault-free run of
  `case` trained to its step at `global_batch` examples an update."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  chaos_dir = os.path.join(work_dir, "model")
  chaos, step = _weights(chaos_dir)
  free_dir = os.path.join(work_dir, "fault_free")
  argv = [*core.WORKER, f"--case={case}",
          f"--examples={core.CASES[case]}",
          f"--global_batch_size={global_batch}", f"--max_steps={step}",
          f"--model_dir={free_dir}",
          f"--out_dir={os.path.join(work_dir, 'fault_free_ids')}",
          "--run=fault_free"]
  proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True,
                        check=False)
  if proc.returncode != 0:
    raise RuntimeError(f"the fault-free run failed: {proc.stderr[-2000:]}")
  free, _ = _weights(free_dir)
  if set(free) != set(chaos):
    raise RuntimeError(
        f"the chaos job's checkpoint holds {sorted(chaos)}, the fault-free "
        f"run's {sorted(free)}")
  if case == "click":
    scores = {"chaos": _click_scores(chaos_dir),
              "fault_free": _click_scores(free_dir)}
  else:
    scores = {"chaos": _mlp_scores(chaos, core.CASES[case]),
              "fault_free": _mlp_scores(free, core.CASES[case])}
  return {"step": step,
          "max_abs_diff": max(float(np.abs(chaos[n] - free[n]).max())
                              for n in chaos),
          **scores}

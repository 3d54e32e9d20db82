"""Synchronous parameter servers with real processes: a chief, a worker and
ps tasks through the launcher, against one process.

Each update averages both workers' gradients before one apply, and reads
its examples at the input position ([uB, (u + 1)B), each worker its half),
so after 20 updates the variables equal one process's with the same global
batch, the embedding tables' sparse updates included. The AUC test also has
the chief predict after the worker exited (once a hang).
"""
import json

import pytest

from tests.helpers.processes import PYTHON, dump_args, launch, run
from tests.helpers.results import load_workers, max_difference

TOLERANCE = 1e-5
AUC_TOLERANCE = 0.005



def _variables(worker, with_slots):
  """The model's variables (and the optimizer's slots) a worker holds; a
  table in one part on a ps task by its whole name."""
  held = {k.split("@")[0]: v for k, v in worker.items()
          if k.startswith("model/") and k.endswith("@0")}
  assert not any("/part_1" in name for name in held), sorted(held)
  return {name.replace("/part_0", ""): value for name, value in held.items()
          if with_slots or not name.endswith("/Adagrad")}


SCALING_RULES = {
    "adascale": dict(lr_scaling="adascale"),
    "adascale_parts": dict(lr_scaling="adascale",
                           adascale_parts="embeddings,dense"),
    # r small enough that the clipping binds; S fixed, as one process's
    # update averages fewer gradient samples.
    "cowclip": dict(lr_scaling="cowclip", cowclip_ratio=1e-4,
                    cowclip_min_norm=1e-5, batch_scale=4),
}


@pytest.mark.parametrize("rule", sorted(SCALING_RULES))
def test_variables_after_20_updates_equal_one_process(rule, tmp_path):
  # Dense and sparse parts, Adagrad's slots, accumulation 2 and a scaling
  # rule that reads the reduced gradient in one job; two ps tasks hold the
  # tables, and their accumulators, between them. (Plain SGD is the canned
  # case below.)
  accumulation = 2
  flags = dict(case="feature_columns", examples=128, global_batch_size=32,
               steps=20, optimizer="adagrad", learning_rate=0.1,
               **SCALING_RULES[rule])
  # One process takes the same 2 x k micro-batches of each update.
  run([PYTHON] + dump_args(tmp_path / "one", tmp_path / "one-m",
                           accumulation_steps=2 * accumulation, **flags))
  launch(1, dump_args(tmp_path / "sync", tmp_path / "sync-m",
                      distribution="parameter_server", ps_sync="true",
                      accumulation_steps=accumulation, **flags), ps=2,
         timeout=400)
  (reference,) = load_workers(tmp_path / "one")
  chief, worker = load_workers(tmp_path / "sync")
  assert int(chief["global_step@0"]) == 20
  # The chief's graph has the optimizer; the worker's only the model.
  differences = [
      max_difference(_variables(reference, True), _variables(chief, True)),
      max_difference(_variables(reference, False), _variables(worker, False))]
  print(f"ps_sync: max |sync - one process| after 20 updates: "
        f"chief {differences[0]:.3g}, worker {differences[1]:.3g}")
  assert max(differences) <= TOLERANCE
  assert any("embedding_weights" in k for k in _variables(chief, True))


def _auc(tmp_path, label, *extra):
  out = tmp_path / label
  args = ["-m", "tests.workers.ps_sync_auc", f"--out_dir={out}",
          f"--model_dir={tmp_path / (label + '-m')}", "--steps=100",
          "--train_examples=12800", *extra]
  if extra:
    launch(1, args, ps=1, timeout=400)
  else:
    run([PYTHON] + args, timeout=400)
  return json.loads((out / "score.json").read_text())


def test_wide_deep_auc_sync_matches_one_process_async_reported(tmp_path):
  one = _auc(tmp_path, "one")
  sync = _auc(tmp_path, "sync", "--distribution=parameter_server",
              "--ps_sync")
  asynchronous = _auc(tmp_path, "async", "--distribution=parameter_server")
  print(f"wide & deep eval AUC after 100 updates: one process "
        f"{one['auc']:.4f}, synchronous PS {sync['auc']:.4f}, asynchronous "
        f"PS {asynchronous['auc']:.4f} (planted {one['planted_auc']:.4f})")
  assert sync["global_step"] == one["global_step"] == 100
  assert abs(sync["auc"] - one["auc"]) <= AUC_TOLERANCE
  # Asynchronous: reported, and it learnt something.
  assert asynchronous["auc"] > 0.7


def test_canned_optimizer_scales_a_canned_estimator_in_sync(tmp_path):
  # A canned LinearClassifier through es.canned_optimizer: its SGD at 0.05
  # with 2 micro-batches per update and linear scaling at S = 2 workers x 2
  # is one process's SGD at 0.2 on the same batches of 16, exactly.
  flags = ["--case=linear", "--global_batch_size=16", "--steps=10"]
  worker = ["-m", "tests.workers.canned_run"]
  run([PYTHON] + worker + [f"--out_dir={tmp_path / 'one'}",
                           f"--model_dir={tmp_path / 'one-m'}",
                           "--learning_rate=0.2"] + flags)
  launch(1, worker + [f"--out_dir={tmp_path / 'sync'}",
                      f"--model_dir={tmp_path / 'sync-m'}",
                      "--learning_rate=0.05", "--lr_scaling=linear",
                      "--accumulation_steps=2",
                      "--distribution=parameter_server", "--ps_sync"] + flags,
         ps=1, timeout=400)
  (reference,) = load_workers(tmp_path / "one")
  model = {k: v for k, v in reference.items() if k.startswith("linear/")}
  assert model
  for held in load_workers(tmp_path / "sync"):
    assert max_difference(model, {k: held[k] for k in model}) <= TOLERANCE

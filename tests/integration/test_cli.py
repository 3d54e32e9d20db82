"""The command line, end to end, in subprocesses (as a user runs it)."""
import json
import os
import re
import signal
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf

from model_zoo import linear_regression
from tests.helpers import waiting
from tests.helpers.checkpoints import checkpoint_step
from tests.helpers.processes import (CLI, KERAS_ADASCALE, PYTHON, ROOT,
                                     horovodrun_argv, run, worker_env)


def test_digits_cnn_with_defaults_reaches_accuracy(tmp_path):
  summary = tmp_path / "summary.json"
  proc = run(CLI + [f"--model_dir={tmp_path / 'model'}",
                    f"--summary_json={summary}"])
  assert "progress: step" in proc.stderr and "examples/sec" in proc.stderr
  result = json.loads(summary.read_text())
  for key in ("model", "distribution", "global_step", "examples_per_sec",
              "wall_seconds", "eval"):
    assert key in result
  assert result["model"] == "digits_cnn" and result["global_step"] == 1000
  assert result["eval"]["accuracy"] >= 0.95
  assert "loss" in result["eval"]


def test_keras_digits_with_accumulation_and_adascale_reaches_accuracy(
    tmp_path):
  summary = tmp_path / "summary.json"
  run(CLI + KERAS_ADASCALE + [f"--model_dir={tmp_path / 'model'}",
                              f"--summary_json={summary}"])
  result = json.loads(summary.read_text())
  assert result["eval"]["accuracy"] >= 0.95, result
  assert 1.0 < result["adascale_gain"] <= 4.0


@pytest.mark.parametrize("flags", [
    ["--optimizer=lars", "--learning_rate=0.05", "--trust_coefficient=0.02"],
    ["--optimizer=lamb", "--learning_rate=0.005"],
], ids=["lars", "lamb"])
def test_large_batch_optimizers_train_digits_cnn_with_accumulation(
    tmp_path, flags):
  summary = tmp_path / "summary.json"
  run(CLI + flags + ["--model=digits_cnn", "--accumulation_steps=4",
                     f"--model_dir={tmp_path / 'model'}",
                     f"--summary_json={summary}"])
  result = json.loads(summary.read_text())
  assert result["eval"]["accuracy"] >= 0.95, result


def test_periodic_evaluation_best_export_and_summary(tmp_path):
  summary, model_dir = tmp_path / "summary.json", tmp_path / "model"
  run(CLI + ["--model=digits_mlp", f"--model_dir={model_dir}",
             "--train_steps=300", "--eval_every_n_steps=100",
             "--export_best=accuracy:max", f"--summary_json={summary}"])
  result = json.loads(summary.read_text())
  steps = [e["global_step"] for e in result["evaluations"]]
  assert steps == [100, 200, 300]
  assert result["eval"] == result["evaluations"][-1]
  best = max(result["evaluations"], key=lambda e: e["accuracy"])
  (export,) = (model_dir / "export" / "best").iterdir()
  assert tf.train.load_variable(str(export / "variables" / "variables"),
                                "global_step") == best["global_step"]


def test_early_stopping_from_the_cli(tmp_path):
  # global_step never improves on its first value under :min, so the
  # second evaluation in a row without improvement (step 30) must stop it.
  summary = tmp_path / "summary.json"
  run(CLI + ["--model=digits_mlp", f"--model_dir={tmp_path / 'model'}",
             "--train_steps=1000", "--eval_every_n_steps=10",
             "--export_best=global_step:min", "--early_stopping=2",
             f"--summary_json={summary}"])
  result = json.loads(summary.read_text())
  assert result["global_step"] == 30
  assert [e["global_step"] for e in result["evaluations"]] == [10, 20, 30]


def test_linear_regression_recovers_true_weights(tmp_path):
  run(CLI + ["--model=linear_regression", f"--model_dir={tmp_path}",
             "--train_steps=600"])
  weights = tf.train.load_variable(str(tmp_path), "model/linear/kernel")
  bias = tf.train.load_variable(str(tmp_path), "model/linear/bias")
  np.testing.assert_allclose(weights, linear_regression.TRUE_WEIGHTS,
                             atol=1e-2)
  assert abs(bias[0] - linear_regression.TRUE_BIAS) < 1e-2


def test_adascale_summary_fields(tmp_path):
  summary = tmp_path / "s.json"
  run(CLI + ["--model=digits_mlp", f"--model_dir={tmp_path / 'm'}",
             "--train_steps=20", "--accumulation_steps=4",
             "--lr_scaling=adascale", f"--summary_json={summary}",
             "--export_dir", str(tmp_path / "export")])
  result = json.loads(summary.read_text())
  assert result["updates"] == 20 and 20 <= result["adascale_progress"] <= 80
  assert 1.0 <= result["adascale_gain"] <= 4.0
  assert len(list((tmp_path / "export").iterdir())) == 1


def test_models_command_lists_the_zoo():
  out = run(CLI + ["models"]).stdout
  for name in ("linear_regression", "digits_mlp", "digits_cnn",
               "digits_autoencoder", "resnet20"):
    assert name in out


@pytest.mark.parametrize("flags,message", [
    (["--model=nope"], r"--model='nope' is not a registered model; valid: "
                       r"census, digits_autoencoder, digits_cnn"),
    (["--distribution=mirrored", "--replicas=2", "--global_batch_size=3"],
     r"--global_batch_size=3 does not divide .* multiple of 2"),
    (["--train_steps=0"], r"--train_steps=0: 0 is not a positive integer"),
    (["--global_batch_size=-8"], r"--global_batch_size=-8: -8 is not a "
                                 r"positive integer"),
    (["--distribution=ring"], r"--distribution=ring: value should be one of "
                              r"<none\|mirrored"),
    (["--export_best=loss"], r"--export_best=loss: must be METRIC:min or "
                             r"METRIC:max"),
    (["--nonexistent_flag=1"], r"Unknown command line flag 'nonexistent_flag'"),
    (["evaluate_all"], r"unknown command 'evaluate_all'; valid: train"),
    (["--hparams=filters"], r"--hparams: malformed item 'filters'"),
    (["--hparams=width=3"], r"unknown hyperparameter 'width'; valid: "
                            r"data_seed, dense_units, filters"),
    (["--lr_scaling=cubic"], r"--lr_scaling=cubic: value should be one of "
                             r"<identity\|linear"),
    (["--accumulation_steps=0"], r"--accumulation_steps=0 must be"),
    (["--batch_scale=0.5"], r"--batch_scale=0.5 must be >= 1"),
    (["--distribution=horovod", "--model_dir=/tmp/x"],
     r"started by horovodrun"),
    (["--optimizer=rmsprop"], r"--optimizer=rmsprop: value should be one of "
                              r"<sgd\|momentum"),
    (["--optimizer=adamw", "--momentum=0.5"], r"--momentum does not apply "
                                              r"to --optimizer=adamw \(its "
                                              r"option flags: --weight_decay"),
])
def test_bad_input_fails_fast_with_a_clear_message(flags, message, tmp_path):
  proc = run(CLI + [f"--model_dir={tmp_path}"] + flags, check=False)
  assert proc.returncode == 2
  assert proc.stderr.count("Traceback") == 0, proc.stderr[-2000:]
  errors = [l for l in proc.stderr.splitlines() if "error" in l.lower()]
  assert len(errors) == 1, proc.stderr[-2000:]
  assert re.search(message, errors[0]), proc.stderr[-2000:]


def test_a_bug_in_the_users_model_keeps_its_traceback(tmp_path):
  # Imported here: importing it registers its broken models, which
  # test_model_contract would then collect as if they were the zoo's.
  from tests.workers import broken_models  # pylint: disable=g-import-not-at-top
  proc = run(CLI + ["--model_module=tests.workers.broken_models",
                    "--model=shape_bug", f"--model_dir={tmp_path}",
                    "--train_steps=5"], check=False)
  assert proc.returncode not in (0, 2), proc.stderr[-2000:]
  assert "Traceback" in proc.stderr
  assert f'{broken_models.__file__}", line' in proc.stderr
  assert broken_models.BUG_LINE in proc.stderr
  assert "Dimensions must be equal, but are 64 and 63" in proc.stderr
  assert "raised in the model's ShapeBug.logits()" in proc.stderr


@pytest.mark.parametrize("tf_config,message", [
    ("{oops", "TF_CONFIG is not valid JSON"),
    (json.dumps({"cluster": {"worker": ["localhost:1"]},
                 "task": {"type": "worker", "index": 5}}),
     "index 5 is outside the cluster"),
])
def test_bad_tf_config_fails_with_a_clear_message(tf_config, message,
                                                  tmp_path):
  env = dict(worker_env(), TF_CONFIG=tf_config)
  proc = run(CLI + [f"--model_dir={tmp_path}",
                    "--distribution=multi_worker_mirrored"], check=False,
             env=env)
  assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-2000:]


def test_missing_horovod_says_how_to_install(tmp_path):
  fake = tmp_path / "fake" / "horovod"
  fake.mkdir(parents=True)
  (fake / "__init__.py").write_text("raise ImportError('no horovod here')\n")
  env = dict(worker_env(), HOROVOD_RANK="0",
             PYTHONPATH=f"{tmp_path / 'fake'}:{ROOT}")
  proc = run(CLI + [f"--model_dir={tmp_path}", "--distribution=horovod"],
             check=False, env=env)
  assert proc.returncode != 0 and "make setup" in proc.stderr, proc.stderr[-2000:]


def test_evaluate_and_export_an_existing_model_dir(tmp_path):
  model_dir, summary = tmp_path / "model", tmp_path / "eval.json"
  common = ["--model=digits_mlp", f"--model_dir={model_dir}"]
  run(CLI + common + ["--train_steps=100", "--save_checkpoints_steps=50"])
  latest = run(CLI + ["evaluate"] + common).stdout
  assert "model.ckpt-100: accuracy=" in latest
  run(CLI + ["evaluate", "--checkpoint=model.ckpt-50",
             f"--summary_json={summary}"] + common)
  assert json.loads(summary.read_text())["eval"]["global_step"] == 50
  run(CLI + ["export", "--checkpoint=model.ckpt-50",
             f"--export_dir={tmp_path / 'export'}"] + common)
  (export,) = (tmp_path / "export").iterdir()
  assert tf.train.load_variable(str(export / "variables" / "variables"),
                                "global_step") == 50
  missing = run(CLI + ["evaluate", "--checkpoint=model.ckpt-7"] + common,
                check=False)
  assert missing.returncode == 2
  assert "--checkpoint=model.ckpt-7 is not a checkpoint" in missing.stderr


_LAUNCHER_HELP_IMPORTS = """
import runpy, sys
sys.argv = ["estimator-scale-launch", "--help"]
try:
  runpy.run_module("estimator_scale.launcher", run_name="__main__",
                   alter_sys=True)
finally:
  loaded = sorted(m for m in sys.modules if m.startswith("tensorflow"))
  print("tensorflow modules loaded:", loaded)
"""
"""`python -m estimator_scale.launcher --help`, then what it imported."""


def test_launcher_starts_without_tensorflow():
  out = run([PYTHON, "-c", _LAUNCHER_HELP_IMPORTS]).stdout
  assert "--workers" in out, out  # the help ran
  assert "tensorflow modules loaded: []" in out, out


def test_launcher_gives_each_worker_its_tf_config():
  out = run([PYTHON, "-m", "estimator_scale.launcher", "--workers", "2", "--",
             PYTHON, "-c", "import os; print(os.environ['TF_CONFIG'])"]).stdout
  assert '"task": {"type": "worker", "index": 1}' in out


def _rank_pids(model_dir):
  """The pids of the CLI processes training into `model_dir`."""
  pids = []
  for entry in os.listdir("/proc"):
    try:
      with open(f"/proc/{entry}/cmdline", "rb") as f:
        argv = f.read().split(b"\0")
    except (FileNotFoundError, NotADirectoryError, PermissionError,
            ProcessLookupError):
      continue
    if b"estimator_scale.cli" in argv and (
        f"--model_dir={model_dir}".encode() in argv):
      pids.append(int(entry))
  return pids


def test_a_sigterm_stops_every_rank_with_a_checkpoint_and_exit_143(tmp_path):
  # 143, not 0: a batch script's `srun ... && exit 0` or a Kubernetes Job
  # must not take a run stopped half way for a finished one.
  model_dir = tmp_path / "model"
  proc = subprocess.Popen(
      horovodrun_argv(2, ["-m", "estimator_scale.cli",
                          "--distribution=horovod",
                          "--model=linear_regression",
                          f"--model_dir={model_dir}",
                          "--train_steps=100000000",
                          "--save_checkpoints_steps=20"]),
      cwd=ROOT, env=worker_env(), stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True)
  try:
    # A checkpoint past step 0: every rank has made an update, so each has
    # its SIGTERM handler (installed when its session starts) in place.
    waiting.wait_for(lambda: checkpoint_step(model_dir) >= 20,
                     "checkpoint of step 20", time.monotonic() + 180,
                     proc=proc, poll=0.5)
    os.kill(_rank_pids(model_dir)[-1], signal.SIGTERM)
    output = proc.communicate(timeout=120)[0]
  finally:
    proc.kill()
  assert proc.returncode != 0, output[-3000:]
  # Every rank stops after the same update and exits 143; horovodrun ends
  # the others at the first exit it sees, so a rank that has not exited yet
  # may read as killed (137), never as failed, and after the checkpoint.
  codes = re.findall(r"Process \d+ exit with status code (\d+)", output)
  assert codes and codes[0] == "143" and set(codes) <= {"143", "137"}, (
      output[-3000:])
  stopped = re.search(r"stopped by a signal at step (\d+)", output)
  assert stopped, output[-3000:]
  assert tf.train.latest_checkpoint(str(model_dir)).endswith(
      f"-{stopped.group(1)}")

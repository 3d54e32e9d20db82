"""The command line, end to end, in subprocesses (as a user runs it)."""
import json

import numpy as np
import pytest
import tensorflow as tf

from model_zoo import linear_regression
from tests.conftest import PYTHON, run

CLI = [PYTHON, "-m", "estimator_scale.train"]


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


KERAS_ADASCALE = ["--model=digits_mlp", "--accumulation_steps=4",
                  "--lr_scaling=adascale", "--learning_rate=0.02"]
"""digits_mlp (Keras layers made in logits), 4 micro-batches, AdaScale."""


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
                       r"digits_autoencoder, digits_cnn"),
    (["--distribution=mirrored", "--replicas=2", "--global_batch_size=3"],
     r"--global_batch_size=3 does not divide .* multiple of 2"),
    (["--train_steps=0"], r"--train_steps must be > 0"),
    (["--global_batch_size=-8"], r"--global_batch_size must be > 0"),
    (["--hparams=filters"], r"--hparams: malformed item 'filters'"),
    (["--hparams=width=3"], r"unknown hyperparameter 'width'; valid: "
                            r"data_seed, dense_units, filters"),
    (["--lr_scaling=cubic"], r"--lr_scaling='cubic' is unknown; valid: "
                             r"identity, linear"),
    (["--accumulation_steps=0"], r"--accumulation_steps must be"),
    (["--scale=0.5"], r"--scale must be >= 1"),
    (["--distribution=horovod", "--model_dir=/tmp/x"],
     r"started by horovodrun"),
    (["--optimizer=rmsprop"], r"--optimizer='rmsprop' is unknown"),
])
def test_bad_input_fails_fast_with_a_clear_message(flags, message, tmp_path):
  proc = run(CLI + [f"--model_dir={tmp_path}"] + flags, check=False)
  assert proc.returncode != 0
  assert proc.stderr.count("Traceback") == 0, proc.stderr[-2000:]
  import re  # pylint: disable=g-import-not-at-top
  assert re.search(message, proc.stderr), proc.stderr[-2000:]


@pytest.mark.parametrize("tf_config,message", [
    ("{oops", "TF_CONFIG is not valid JSON"),
    (json.dumps({"cluster": {"worker": ["localhost:1"]},
                 "task": {"type": "worker", "index": 5}}),
     "index 5 is outside the cluster"),
])
def test_bad_tf_config_fails_with_a_clear_message(tf_config, message,
                                                  tmp_path):
  from tests.conftest import worker_env  # pylint: disable=g-import-not-at-top
  env = dict(worker_env(), TF_CONFIG=tf_config)
  proc = run(CLI + [f"--model_dir={tmp_path}",
                    "--distribution=multi_worker_mirrored"], check=False,
             env=env)
  assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-2000:]


def test_missing_horovod_says_how_to_install(tmp_path):
  from tests.conftest import ROOT, worker_env  # pylint: disable=g-import-not-at-top
  fake = tmp_path / "fake" / "horovod"
  fake.mkdir(parents=True)
  (fake / "__init__.py").write_text("raise ImportError('no horovod here')\n")
  env = dict(worker_env(), HOROVOD_RANK="0",
             PYTHONPATH=f"{tmp_path / 'fake'}:{ROOT}")
  proc = run(CLI + [f"--model_dir={tmp_path}", "--distribution=horovod"],
             check=False, env=env)
  assert proc.returncode != 0 and "make setup" in proc.stderr, proc.stderr[-2000:]

"""--train_data/--eval_data: the user's TFRecord and CSV files, any file system."""
import json

import pytest

import estimator_scale as es
from estimator_scale.inputs import data_files
from model_zoo import digits
from model_zoo import digits_data
from tests.helpers.processes import CLI, PYTHON, run

DIGITS = ["--model=digits_mlp", "--train_steps=600"]


@pytest.fixture(scope="module")
def digits_files(tmp_path_factory):
  """The digits split as 4 TFRecord shards and as 2 CSV files per split."""
  root = tmp_path_factory.mktemp("digits")
  spec = digits.DigitsMLP().feature_spec()
  for split, (images, labels) in zip(("train", "test"),
                                     digits_data.load_split()):
    es.inputs.write_tfrecord_shards({"image": images}, labels, str(root), 4,
                                    prefix=split)
    for half in (0, 1):
      data_files.write_csv({"image": images[half::2]}, labels[half::2],
                           str(root / f"{split}-{half}.csv"), spec)
  return root


def _accuracy(tmp_path, extra, command=CLI):
  summary = tmp_path / "summary.json"
  run(command + DIGITS + [f"--model_dir={tmp_path / 'model'}",
                          f"--summary_json={summary}"] + extra)
  return json.loads(summary.read_text())["eval"]["accuracy"]


@pytest.mark.parametrize("extension", ["tfrecord", "csv"])
def test_cli_trains_on_the_users_files(digits_files, extension, tmp_path):
  accuracy = _accuracy(tmp_path, [
      f"--train_data={digits_files}/train-*.{extension}",
      f"--eval_data={digits_files}/test-*.{extension}"])
  assert accuracy >= 0.95


def test_cli_reads_a_remote_file_system(digits_files, tmp_path):
  ram_cli = [PYTHON, "-m", "tests.workers.ram_cli", str(digits_files),
             "ram://digits", "--", "estimator-scale"]
  accuracy = _accuracy(tmp_path, ["--train_data=ram://digits/train-*.tfrecord",
                                  "--eval_data=ram://digits/test-*.tfrecord"],
                       command=ram_cli)
  assert accuracy >= 0.95

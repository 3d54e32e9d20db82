"""Wide & deep at Criteo's table sizes on a real parameter-server cluster.

A chief, a worker and two ps tasks, started by the launcher, train
`wide_deep` through the command line with 26 hashed columns of 2^20
buckets (832 MiB of embeddings at dimension 8, as much again in Adagrad's
accumulators) for a few steps, then export it. One run proves three
things: the chief's capacity line gives the tables' bytes, their slots'
and about half of both on each ps task (the slice is lowered so that every
32 MiB table is split in two); the checkpoint and the export hold each
table whole; and the export scores serialized tf.train.Examples as
`predict` on the checkpoint does.

The click logs come from the same generator with the same vocabularies,
but only a few hundred rows, written by the test and passed as
--train_data and --eval_data: the model's own 65,000 rows would take
longer to write than three steps take to train.
"""
import os
import re

import numpy as np
import tensorflow as tf

import estimator_scale as es
from model_zoo import click_data
from model_zoo import wide_deep
from tests.helpers.processes import CLI, launch, worker_env

BUCKETS = 1 << 20
DIM = 8
SIZES = {"train": 256, "eval": 64}
MIB = float(1 << 20)
_CAPACITY = re.compile(r"capacity: variables ([\d.]+) MiB, optimizer slots "
                       r"and state ([\d.]+) MiB; held by (.*)")


def _write_clicks(directory):
  """{split: glob} of the generator's rows. Every value is written: a
  missing count as 0 (what the model's columns read for it), a missing id
  as the id -1."""
  vocabulary = (BUCKETS,) * len(click_data.CATEGORICAL)
  patterns = {}
  for split, count in SIZES.items():
    features, labels, _ = click_data.generate(split, count=count,
                                              vocabulary=vocabulary)
    features = {name: np.nan_to_num(values, nan=0.0)
                for name, values in features.items()}
    es.inputs.write_tfrecord_shards(features, labels, str(directory / split),
                                    2, label_key=click_data.LABEL)
    patterns[split] = str(directory / split / "*.tfrecord")
  return patterns


def _capacity(output):
  """(table MiB, slot MiB, {holder: MiB}) of the chief's capacity line."""
  match = _CAPACITY.search(output)
  assert match, output[-3000:]
  print(match.group(0))
  held = dict(re.match(r"(\S+) ([\d.]+) MiB", part.strip()).groups()
              for part in match.group(3).split(","))
  return (float(match.group(1)), float(match.group(2)),
          {holder: float(mib) for holder, mib in held.items()})


def _predicted(model_dir, hparams, records):
  """`predict`'s scores of serialized `records` from the latest checkpoint,
  in one process."""
  estimator = es.make_estimator(wide_deep.WideDeep(),
                                model_dir=str(model_dir), hparams=hparams)
  spec = dict(estimator.model.feature_spec())
  spec.pop(click_data.LABEL)

  def input_fn():
    return tf.data.Dataset.from_tensors(tf.constant(records)).map(
        lambda batch: tf.io.parse_example(batch, spec))
  (predicted,) = estimator.predict(input_fn, yield_single_examples=False)
  return predicted


def test_26_tables_of_2_to_the_20_train_on_ps_and_export(tmp_path):
  data = _write_clicks(tmp_path / "clicks")
  sizes = ":".join([str(BUCKETS)] * len(click_data.CATEGORICAL))
  hparams = f"vocabulary_sizes={sizes},embedding_dim={DIM}"
  model_dir, export = tmp_path / "model", tmp_path / "export"
  args = CLI[1:] + [
      "train", "--model=wide_deep", "--distribution=parameter_server",
      "--optimizer=adagrad", "--learning_rate=0.05", f"--hparams={hparams}",
      "--train_steps=3", "--global_batch_size=16", "--eval_steps=1",
      f"--train_data={data['train']}", f"--eval_data={data['eval']}",
      f"--model_dir={model_dir}", f"--export_dir={export}"]
  env = dict(worker_env(), ESTIMATOR_SCALE_MIN_SLICE_BYTES=str(16 << 20))
  proc = launch(1, args, ps=2, timeout=400, env=env)

  tables, slots, held = _capacity(proc.stdout + proc.stderr)
  columns = len(click_data.CATEGORICAL)
  embeddings = columns * BUCKETS * DIM * 4 / MIB  # the deep part's, 832 MiB
  linear = columns * BUCKETS * 4 / MIB  # the wide part's one-wide tables
  assert embeddings + linear <= tables <= embeddings + linear + 1, tables
  assert abs(slots - tables) <= 1, (slots, tables)  # one accumulator each
  assert sorted(held) == ["ps:0", "ps:1"], held
  for holder, mib in held.items():
    assert abs(mib - (tables + slots) / 2) <= 0.05 * (tables + slots) / 2, (
        holder, held)

  table = "model/deep/C1_embedding/embedding_weights"
  assert dict(tf.train.list_variables(str(model_dir)))[table] == [BUCKETS,
                                                                   DIM]
  (path,) = [os.path.join(export, name) for name in os.listdir(export)
             if name.isdigit()]
  exported = dict(tf.train.list_variables(
      os.path.join(path, "variables", "variables")))
  assert exported[table] == [BUCKETS, DIM]

  records = [record.numpy() for record in tf.data.TFRecordDataset(
      sorted(tf.io.gfile.glob(data["eval"]))).take(32)]
  served = tf.saved_model.load(path).signatures["serving_default"](
      examples=tf.constant(records))
  predicted = _predicted(model_dir, hparams, records)
  for key in ("logistic", "logits"):
    difference = np.abs(served[key].numpy().reshape(-1) -
                        predicted[key].reshape(-1)).max()
    print(f"export - predict, {key}: max |difference| {difference:.2e}")
    assert difference <= 1e-5, (key, difference)
  assert np.ptp(predicted["logistic"]) > 0  # not one constant score

"""A table sharded over Horovod ranks trains as the replicated table does.

Each horovodrun job trains several configurations twice per rank (table
sharded by `es.sharded_embedding`, table an ordinary replicated variable)
from the same initial values; after 20 updates every rank's shard, with its
optimizer slots, must equal its rows of the replicated table and slots, and
the dense layer and AdaScale's state must be equal.
"""
import numpy as np
import pytest
import tensorflow as tf

from estimator_scale.embeddings import initializers
from tests.helpers.processes import horovod
from tests.workers import sharded_equivalence as worker

TOLERANCE = 1e-5

TABLE = "model/table"


def _load(out, config, kind, rank):
  name = f"{config}-{kind}" if kind else config
  with np.load(out / f"{name}-rank{rank}.npz") as values:
    return dict(values)


def _assert_equivalent(out, config, ranks, kind="sharded"):
  replicated = [_load(out, config, "replicated", r) for r in range(ranks)]
  shards = [_load(out, config, kind, r) for r in range(ranks)]
  whole = replicated[0]
  rows = whole[TABLE].shape[0]
  assert set(shards[0]) == set(whole), config
  for name, value in whole.items():
    variable = name.rpartition(":")[2]  # "start:" values too
    if variable == TABLE or variable.startswith(TABLE + "/"):  # and slots
      held = [shard[name] for shard in shards]
      assert sum(len(h) for h in held) == rows, (config, name)
      assert max(len(h) for h in held) - min(len(h) for h in held) <= 1
      mine = np.concatenate(held)
    else:
      mine = shards[0][name]
    assert np.max(np.abs(mine - value)) <= TOLERANCE, (config, name)
  for rank in range(1, ranks):  # dense variables the same on every rank
    for name, value in shards[rank].items():
      if not name.rpartition(":")[2].startswith(TABLE):
        assert np.max(np.abs(value - shards[0][name])) <= TOLERANCE, name
  # The runs trained: the table moved from its initial rows.
  initial = 0.3 * np.sin(np.arange(rows)[:, None] * 1.7 +
                         np.arange(whole[TABLE].shape[1])[None, :] * 0.9 + 0.2)
  assert np.max(np.abs(whole[TABLE] - initial)) > 1e-2, config


def _assert_compressed(out, ranks):
  """fp16 compression: float16 alltoalls both ways (the vectors, their
  gradients), float32 without; the vectors are the rows rounded to float16
  and the shard's gradient is within float16's rounding of the
  uncompressed one."""
  for rank in range(ranks):
    got = _load(out, "compression", None, rank)
    assert list(got["none:exchanged"]) == ["float32"] * 2
    assert list(got["fp16:exchanged"]) == ["float16"] * 2
    exact = got["none:vectors"]
    np.testing.assert_array_equal(got["fp16:vectors"],
                                  exact.astype(np.float16).astype(np.float32))
    assert np.abs(got["fp16:vectors"] - exact).max() > 0  # it did round
    grad, rounded = got["none:grad"], got["fp16:grad"]
    assert np.all(np.abs(rounded - grad) <= np.abs(grad) * 2.0 ** -11)
    assert np.abs(rounded - grad).max() > 0


def _assert_initialized_and_trained(out, ranks):
  """TF 2's own initializers: the constant's shards are the table's rows,
  each rank's normal shard is its part as `part_initializer` draws it (not
  another rank's values), and both trained."""
  got = [_load(out, "initializers", None, rank) for rank in range(ranks)]
  np.testing.assert_array_equal(
      np.concatenate([g["constant:start"] for g in got]),
      worker.CONSTANT_TABLE)
  for g in got:
    first, rows = int(g["first_row"]), len(g["normal:start"])
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
      part = sess.run(initializers.part_initializer(
          worker.INITIALIZERS["normal"], [worker.VOCABULARY,
                                          worker.DIMENSION], first)(
                                              [rows, worker.DIMENSION]))
    np.testing.assert_allclose(g["normal:start"], part, rtol=0, atol=1e-6)
    for name in worker.INITIALIZERS:
      assert g[f"{name}:last_loss"] < 0.5 * g[f"{name}:first_loss"], name
  rows = min(len(g["normal:start"]) for g in got)
  assert not np.allclose(got[0]["normal:start"][:rows],
                         got[1]["normal:start"][:rows])


@pytest.mark.parametrize("ranks,configs,layer_configs", [
    (2, ["adagrad-k1-adascale", "sgd-k4-adascale"], ["sgd-k4-adascale"]),
    (3, list(worker.CONFIGS), []),
])
def test_sharded_table_trains_as_the_replicated_one(ranks, configs,
                                                    layer_configs, tmp_path):
  """On 2 ranks the Keras layer and the feature column train as the
  function does, fp16 compression rounds as float16 does, and tables of
  TF 2's own initializers start where they should and train."""
  out = tmp_path / "out"
  horovod(ranks, ["-m", "tests.workers.sharded_equivalence",
                  f"--out_dir={out}", f"--model_dir={tmp_path / 'model'}",
                  f"--configs={','.join(configs)}",
                  f"--layer_configs={','.join(layer_configs)}",
                  f"--compression_check={bool(layer_configs)}",
                  f"--initializer_check={bool(layer_configs)}"], timeout=480)
  for config in configs:
    _assert_equivalent(out, config, ranks)
    if "adascale" in config:  # a gain above 1 was compared, not a constant
      assert _load(out, config, "sharded", 0)["adascale/gain"] > 1.5
  for config in layer_configs:
    for kind in ("keras", "column"):
      _assert_equivalent(out, config, ranks, kind)
  if layer_configs:
    _assert_compressed(out, ranks)
    _assert_initialized_and_trained(out, ranks)


def test_four_ranks_restart_on_two_which_evaluate_and_export_the_table(
    tmp_path):
  """Every rank saves its slices, rank 0 merges them; two ranks each read
  their own range back and go on as the replicated table does. Then the
  chief evaluates alone, each rank predicts alone, and the export holds the
  whole table: all score as the replicated model does."""
  config = "adagrad-k4"
  args = ["-m", "tests.workers.sharded_equivalence",
          f"--model_dir={tmp_path / 'model'}", f"--configs={config}",
          "--save_checkpoints_steps=3", "--global_batch_size=48"]
  horovod(4, args + [f"--out_dir={tmp_path / 'four'}", "--steps=6"],
          timeout=300)
  horovod(2, args + [f"--out_dir={tmp_path / 'two'}", "--steps=12",
                     "--evaluate"], timeout=300)
  four = [_load(tmp_path / "four", config, "sharded", r) for r in range(4)]
  two = [_load(tmp_path / "two", config, "sharded", r) for r in range(2)]
  for name in (TABLE, TABLE + "/Adagrad"):
    saved = np.concatenate([shard[name] for shard in four])
    restored = np.concatenate([shard[f"start:{name}"] for shard in two])
    np.testing.assert_array_equal(restored, saved, err_msg=name)
  # Trained on: equal to the replicated run, scores included (every key of
  # the dump), on every rank.
  _assert_equivalent(tmp_path / "two", config, 2)
  logits = two[0]["predict:logits"]
  np.testing.assert_allclose(two[0]["served:logits"], logits, atol=TOLERANCE)
  _, labels = worker.token_data()
  shifted = logits - logits.max(1, keepdims=True)
  log_softmax = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
  loss = -log_softmax[np.arange(len(labels)), labels].mean()
  assert abs(float(two[0]["eval:loss"]) - loss) <= TOLERANCE

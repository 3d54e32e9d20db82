"""Mixed precision and allreduce compression on one process: float16 loss
scaling (overflow, growth), every network style in bfloat16 with
accumulation, and the refusals of what a backend cannot do.

The command line training in mixed_bfloat16 is
tests/integration/test_precision_cli.py.
"""
from google.protobuf import text_format
import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale import backends
from estimator_scale import precision
from tests.helpers import trainer
from tests.workers import tiny_models


@pytest.mark.parametrize("largest_input,overflows", [(8.0, True),
                                                     (0.5, False)])
def test_float16_overflow_skips_the_update_and_lowers_the_scale(
    largest_input, overflows, tmp_path):
  # d loss / d kernel of the second micro-batch is its input times the loss
  # scale 2^15 in float16: 8 x 2^15 overflows (max 65504), 0.5 x 2^15 not.
  x = np.array([[1.0, 1.0], [largest_input, largest_input]], np.float32)
  estimator = trainer.train(tiny_models.SumLinear(2, True),
                            {"x": x, "id": np.arange(2)}, np.zeros(2),
                            tmp_path, 2, 1, optimizer="momentum",
                            accumulation_steps=2, lr_scaling="adascale",
                            precision="mixed_float16")
  value = estimator.get_variable_value
  kernel = value("model/linear/kernel")
  assert kernel.dtype == np.float32 and value("global_step") == 1
  if overflows:
    np.testing.assert_array_equal(kernel, np.full((2, 2), 0.5, np.float32))
    np.testing.assert_array_equal(value("model/linear/bias"), np.zeros(2))
    assert value(precision.LOSS_SCALE) == 2.0 ** 14
    assert value(es.ADASCALE_PROGRESS) == 0.0
    assert value("adascale/nonfinite_updates") == 1
  else:
    assert np.all(kernel < 0.5)
    assert value(precision.LOSS_SCALE) == 2.0 ** 15
    assert value(precision.GOOD_UPDATES) == 1
    assert value(es.ADASCALE_PROGRESS) >= 1.0


def test_loss_scale_grows_after_good_updates_and_halves_down_to_one():
  with tf.Graph().as_default():
    state = precision.LossScale(initial=4.0, growth_steps=2)
    finite = tf.compat.v1.placeholder(tf.bool, [])
    update = state.update(finite)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      seen = []
      for step in (True, True, True, False, True, False, False, False):
        sess.run(update, {finite: step})
        seen.append(sess.run([state.scale, state.good_updates]))
  assert seen == [[4.0, 1], [8.0, 0], [8.0, 1], [4.0, 0], [4.0, 1],
                  [2.0, 0], [1.0, 0], [1.0, 0]]


@pytest.mark.parametrize("case", tiny_models.CASES)
def test_bfloat16_trains_every_network_style_with_accumulation(case,
                                                               tmp_path):
  model, features, labels = tiny_models.generated_data(case, 32)
  estimator = trainer.train(model, features, labels, tmp_path, 16, 3,
                            accumulation_steps=2, precision="mixed_bfloat16")
  names = [n for n in estimator.get_variable_names()
           if n.startswith("model/")]
  assert names and all(
      estimator.get_variable_value(n).dtype in (np.float32, np.int64)
      for n in names)
  graph = tf.compat.v1.GraphDef()
  with open(tmp_path / "graph.pbtxt", encoding="utf-8") as f:
    text_format.Merge(f.read(), graph)
  # The network runs in the accumulation loop's body, a library function.
  nodes = [n for f in graph.library.function for n in f.node_def]
  assert any(node.op in ("MatMul", "BatchMatMulV2") and
             node.attr["T"].type == tf.bfloat16.as_datatype_enum
             for node in nodes)
  metrics = estimator.evaluate(trainer.array_input(features, labels, 16,
                                                   one_pass=True))
  assert np.isfinite(metrics["loss"])
  assert tf.keras.mixed_precision.global_policy().name == "float32"


@pytest.mark.parametrize("distribution,compression,message", [
    ("none", "fp16", "one process has no allreduce"),
    ("mirrored", "fp16", "CommunicationOptions set only bytes_per_pack"),
])
def test_compression_a_backend_lacks_is_refused(distribution, compression,
                                               message):
  backend = backends.get(distribution)
  with pytest.raises(ValueError, match=(
      rf"allreduce_compression='{compression}' is not available with "
      rf"distribution='{distribution}': .*{message}.*; valid there: ")):
    backend.make_reducer(compression)


def test_bad_precision_and_compression_names():
  with pytest.raises(ValueError, match="precision='float8' is unknown; valid: "
                     "float32, mixed_bfloat16, mixed_float16"):
    es.TrainingConfig(precision="float8")
  with pytest.raises(ValueError, match="allreduce_compression='zip' is "
                     "unknown; valid: none, fp16"):
    es.TrainingConfig(allreduce_compression="zip")
  with pytest.raises(ValueError, match="not available with distribution="
                     "'none'"):
    es.make_estimator(tiny_models.SumLinear(2, True),
                      training_config=es.TrainingConfig(
                          allreduce_compression="fp16"))

"""Mixed precision and fp16 allreduce compression on 2 real Horovod ranks,
through the CLI as a user runs it."""
import json

from google.protobuf import text_format
import tensorflow as tf

from tests.helpers.processes import horovod

CLI_ARGS = ["-m", "estimator_scale.cli", "--model=digits_cnn",
            "--distribution=horovod", "--train_steps=500"]


def _run(tmp_path, *flags):
  summary = tmp_path / "summary.json"
  horovod(2, CLI_ARGS + [f"--model_dir={tmp_path / 'model'}",
                        f"--summary_json={summary}"] + list(flags),
          timeout=300)
  return json.loads(summary.read_text())


def _graph(model_dir):
  """The chief's training graph, as Estimator wrote it."""
  graph = tf.compat.v1.GraphDef()
  text_format.Merge((model_dir / "graph.pbtxt").read_text(), graph)
  return graph


def _allreduce_input_dtypes(model_dir):
  """{op name: dtypes of its inputs} of the Horovod allreduces."""
  return {node.name: [tf.as_dtype(node.attr["T"].type)] * len(
      [i for i in node.input if not i.startswith("^")])
          for node in _graph(model_dir).node
          if node.op in ("HorovodAllreduce", "HorovodGroupedAllreduce")}


def test_mixed_bfloat16_trains_digits_on_two_horovod_ranks(tmp_path):
  result = _run(tmp_path, "--precision=mixed_bfloat16")
  assert result["workers"] == 2
  assert result["eval"]["accuracy"] >= 0.95, result
  convolutions = {tf.as_dtype(node.attr["T"].type)
                  for node in _graph(tmp_path / "model").node
                  if node.op == "Conv2D"}
  assert convolutions == {tf.bfloat16}


def test_fp16_compression_sends_float16_and_trains_digits(tmp_path):
  result = _run(tmp_path, "--allreduce_compression=fp16")
  assert result["eval"]["accuracy"] >= 0.95, result
  reduced = _allreduce_input_dtypes(tmp_path / "model")
  # digits_cnn's 8 gradients (4 layers' kernels and biases), the stop flag,
  # the ranks' compute times (stragglers) and input waits in one float16
  # group, and no other exchange: a float32 flag or timing alone would cost
  # a second negotiation every update.
  assert list(reduced.values()) == [[tf.float16] * 11], reduced

"""mixed_bfloat16 from the command line: it trains, and exports float32."""
import json

import tensorflow as tf

from tests.helpers.processes import CLI, run


def test_mixed_bfloat16_trains_digits_and_exports_float32_from_the_cli(
    tmp_path):
  summary = tmp_path / "summary.json"
  run(CLI + ["--model=digits_cnn", "--precision=mixed_bfloat16",
             "--train_steps=500", f"--model_dir={tmp_path / 'model'}",
             f"--summary_json={summary}",
             f"--export_dir={tmp_path / 'export'}"])
  assert json.loads(summary.read_text())["eval"]["accuracy"] >= 0.95
  export = next((tmp_path / "export").iterdir())
  serve = tf.saved_model.load(str(export)).signatures["serving_default"]
  assert serve.structured_input_signature[1]["image"].dtype == tf.float32
  logits = serve(image=tf.zeros([2, 8, 8, 1]))["logits"]
  assert logits.dtype == tf.float32 and logits.shape == (2, 10)

"""What `make run` prints: each line once, no deprecation notices, only the
chief at INFO (2 real Horovod ranks through the CLI)."""
import re

from tests.helpers.processes import horovod

STAMPS = re.compile(r"^(\[\d+\]<std(?:err|out)>:)?"
                    r"([IWEF]\d{4} [\d:.]+ +\d+ |[\d-]+ [\d:.]+: )?")


def test_make_run_output_has_no_repeated_line_and_no_deprecations(tmp_path):
  model_dir = tmp_path / "run"
  proc = horovod(2, ["-m", "estimator_scale.cli", "--distribution=horovod",
                     "--model=digits_cnn", f"--model_dir={model_dir}",
                     f"--summary_json={model_dir / 'summary.json'}",
                     f"--export_dir={model_dir / 'export'}",
                     "--train_steps=300"], timeout=180)
  lines = (proc.stdout + proc.stderr).splitlines()
  seen = {}
  for line in lines:
    text = STAMPS.sub(lambda m: m.group(1) or "", line)
    assert text not in seen, f"printed twice:\n{seen[text]}\n{line}"
    seen[text] = line
  assert not [l for l in lines if "deprecat" in l.lower()]
  assert sum("progress: step" in l for l in lines) == 2
  assert sum("evaluation at step 300" in l for l in lines) == 1
  assert sum("final eval: accuracy=" in l for l in lines) == 1
  assert not [l for l in lines if l.startswith("[1]<stderr>:I")], lines

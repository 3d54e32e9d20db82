"""Tables split over real parameter servers: placement, restore, export.

A chief, a worker and N ps tasks run as processes on this host through the
launcher and the command line, training wide & deep with Adagrad. The
hashed tables (26 x 20,000 rows x 8, 610 KiB each) are larger than the
slice the test sets, so each is split into one part per ps task: the chief's
capacity line, read from the variables' devices, shows every ps task
holding about 1/N of the model and its slots. The checkpoint of 4 ps tasks
then restores into 2, trains on and exports.
"""
import json
import os
import re

import tensorflow as tf

from tests.helpers.processes import CLI, launch, worker_env

_HOLDERS = re.compile(r"capacity: variables ([\d.]+) MiB, optimizer slots "
                      r"and state ([\d.]+) MiB; held by (.*)")


def _train(model_dir, ps, steps, *extra, env=None, check=True):
  args = CLI[1:] + [
      "train", "--model=wide_deep", "--distribution=parameter_server",
      "--optimizer=adagrad", "--learning_rate=0.05",
      "--hparams=hash_bucket_size=20000", f"--train_steps={steps}",
      "--global_batch_size=64", f"--model_dir={model_dir}",
      f"--summary_json={model_dir}/summary.json", *extra]
  return launch(2, args, ps=ps, timeout=500, env=env, check=check)


def _env(**extra):
  return dict(worker_env(), ESTIMATOR_SCALE_MIN_SLICE_BYTES=str(256 << 10),
              **extra)


def _holders(output):
  """(total MiB, {holder: MiB}) of the chief's capacity line."""
  match = _HOLDERS.search(output)
  assert match, output[-3000:]
  held = dict(re.match(r"(\S+) ([\d.]+) MiB", part.strip()).groups()
              for part in match.group(3).split(","))
  return (float(match.group(1)) + float(match.group(2)),
          {holder: float(mib) for holder, mib in held.items()})


def test_tables_split_over_4_ps_restore_into_2_and_export(tmp_path):
  model_dir = tmp_path / "model"
  first = _train(model_dir, 4, 20, env=_env())
  total, held = _holders(first.stdout + first.stderr)
  assert sorted(held) == ["ps:0", "ps:1", "ps:2", "ps:3"], held
  for holder, mib in held.items():
    assert abs(mib - total / 4) <= 0.1 * total / 4, (holder, held, total)
  table = "model/deep/C1_embedding/embedding_weights"
  shapes = dict(tf.train.list_variables(str(model_dir)))
  assert shapes[table] == [20000, 8]  # one tensor, whatever the parts

  export = tmp_path / "export"
  second = _train(model_dir, 2, 40, f"--export_dir={export}", env=_env())
  total_2, held_2 = _holders(second.stdout + second.stderr)
  assert sorted(held_2) == ["ps:0", "ps:1"], held_2
  for holder, mib in held_2.items():
    assert abs(mib - total_2 / 2) <= 0.1 * total_2 / 2, (holder, held_2)
  summary = json.loads((model_dir / "summary.json").read_text())
  assert summary["eval"]["global_step"] >= 40, summary
  reader = tf.train.load_checkpoint(str(model_dir))
  assert reader.get_tensor(table).shape == (20000, 8)
  exported = [name for name in os.listdir(export) if name.isdigit()]
  assert exported, os.listdir(export)


def test_variables_a_ps_task_cannot_hold_are_refused_before_training(
    tmp_path):
  proc = _train(tmp_path / "model", 2, 5, env=_env(
      ESTIMATOR_SCALE_TASK_MEMORY_BYTES=str(8 << 20)), check=False)
  output = proc.stdout + proc.stderr
  assert proc.returncode != 0
  assert re.search(r"do not fit: ps task ps:\d holds them under "
                   r"parameter_server, [\d.]+ MiB .* above the 8.0 MiB a task "
                   r"may hold .* add ps tasks", output), output[-3000:]
  assert tf.train.latest_checkpoint(str(tmp_path / "model")) is None

"""One large table over real parameter servers: memory, restore, export.

A chief, a worker and N ps tasks run as processes on this host through the
launcher and the command line, training one hashed table of 2^22 x 32
(512 MiB; 1 GiB with Adagrad's accumulator) for a few steps. While the job
runs, each ps task's peak resident memory (VmHWM) is read every 50 ms;
above the peak of an idle ps task (one of a job whose variables are all
tiny) it must stay within 1.25x the task's fair share, (table + slots) / N,
through initialisation, the updates and the checkpoint saves, and within
that and its share of the rows once more while the chief evaluates on the
ps tasks (the evaluated checkpoint's rows, beside training's). The chief's
capacity line, read from the variables' devices, shows each task holding
about 1/N. The checkpoint of 4 ps tasks then restores into 2, trains on
within the same bounds and exports the whole table.
"""
import json
import re

import tensorflow as tf

from tests.helpers.processes import CLI, launch, launch_argv, run, worker_env
from tools.bench.ps_memory import phases
from tools.bench.ps_memory import procs

ROWS, DIM = 1 << 22, 32
_HOLDERS = re.compile(r"capacity: variables ([\d.]+) MiB, optimizer slots "
                      r"and state ([\d.]+) MiB; held by (.*)")


def _args(model_dir, steps, *extra, rows=ROWS):
  return CLI[1:] + [
      "train", "--model_module=tools.bench.ps_memory.model",
      "--model=one_table", "--distribution=parameter_server",
      "--optimizer=adagrad", f"--hparams=rows={rows},dim={DIM}",
      f"--train_steps={steps}", "--global_batch_size=16", "--eval_steps=1",
      "--verbosity=1", f"--model_dir={model_dir}",
      f"--summary_json={model_dir}/summary.json", *extra]


def _holders(output):
  """(total MiB, {holder: MiB}) of the chief's capacity line."""
  match = _HOLDERS.search(output)
  assert match, output[-3000:]
  held = dict(re.match(r"(\S+) ([\d.]+) MiB", part.strip()).groups()
              for part in match.group(3).split(","))
  return (float(match.group(1)) + float(match.group(2)),
          {holder: float(mib) for holder, mib in held.items()})


def _train_watched(model_dir, ps, steps, *extra, rows=ROWS):
  """Trains on `ps` ps tasks; returns (output, {ps task: peak MiB},
  {phase: {ps task: largest resident MiB}})."""
  log = f"{model_dir}-{ps}ps.log"
  timeline = []
  peaks, code = procs.watch(
      launch_argv(1, _args(model_dir, steps, *extra, rows=rows), ps),
      worker_env(), log, every=0.05, timeline=timeline, timeout=600)
  with open(log) as f:
    output = f.read()
  assert code == 0, output[-4000:]
  names = [f"ps:{i}" for i in range(ps)]
  assert sorted(n for n in peaks if n.startswith("ps:")) == names, peaks
  by_phase = phases.peaks_by_phase(timeline, output, names)
  return output, {name: procs.mib(peaks[name]) for name in names}, {
      phase: {name: round(procs.mib(size)) for name, size in row.items()}
      for phase, row in by_phase.items()}


def _check_shares(output, peaks, by_phase, ps, idle):
  """Each ps task holds about 1/N (the capacity line) and peaks within
  1.25x of its fair share above an idle ps task; while it evaluates, it
  also holds its share of the evaluated checkpoint's rows (no slots)."""
  total, held = _holders(output)
  share = total / ps
  assert sorted(held) == sorted(peaks), held
  for holder, mib in held.items():
    assert abs(mib - share) <= 0.1 * share, (holder, held, total)
  rows_share = ROWS * DIM * 4 / ps / (1 << 20)
  names = [name for name, _ in phases.PHASES]
  for phase, row in by_phase.items():
    # Freed after the evaluation, the memory stays with the process.
    evaluated = names.index(phase) >= names.index("evaluate")
    bound = 1.25 * share + (rows_share if evaluated else 0)
    above = {name: round(mib - idle) for name, mib in row.items()}
    assert max(above.values()) <= bound, (
        f"{phase}: resident above idle ({idle:.0f} MiB) {above} MiB vs "
        f"{bound:.0f} MiB (fair share {share:.0f} MiB) on {ps} ps tasks; "
        f"resident MiB by phase {by_phase}")
  above = {name: round(peak - idle) for name, peak in peaks.items()}
  assert max(above.values()) <= 1.25 * share + rows_share, (
      f"peak above idle ({idle:.0f} MiB) {above} MiB vs fair share "
      f"{share:.0f} MiB on {ps} ps tasks; resident MiB by phase {by_phase}")


def test_a_table_of_2_to_the_22_stays_within_its_share_on_4_then_2_ps(
    tmp_path):
  # An idle ps task: one of a job whose every variable is tiny.
  _, peaks, _ = _train_watched(tmp_path / "idle", 2, 2, rows=1024)
  idle = min(peaks.values())

  model_dir = tmp_path / "model"
  output, peaks, by_phase = _train_watched(model_dir, 4, 4)
  _check_shares(output, peaks, by_phase, 4, idle)
  table = "model/table/C26_embedding/embedding_weights"
  assert dict(tf.train.list_variables(str(model_dir)))[table] == [ROWS, DIM]

  export = tmp_path / "export"
  output, peaks, by_phase = _train_watched(model_dir, 2, 8,
                                           f"--export_dir={export}")
  _check_shares(output, peaks, by_phase, 2, idle)
  assert "Restoring parameters from" in output, output[-3000:]
  summary = json.loads((model_dir / "summary.json").read_text())
  assert summary["eval"]["global_step"] >= 8, summary
  exported, = [p for p in export.iterdir() if p.name.isdigit()]
  shapes = dict(tf.train.list_variables(str(exported / "variables" /
                                             "variables")))
  assert shapes[table] == [ROWS, DIM], shapes


def test_variables_a_ps_task_cannot_hold_are_refused_before_training(
    tmp_path):
  env = dict(worker_env(), ESTIMATOR_SCALE_MIN_SLICE_BYTES=str(256 << 10),
             ESTIMATOR_SCALE_TASK_MEMORY_BYTES=str(8 << 20))
  proc = launch(2, CLI[1:] + [
      "train", "--model=wide_deep", "--distribution=parameter_server",
      "--optimizer=adagrad", "--hparams=hash_bucket_size=20000",
      "--train_steps=5", "--global_batch_size=48",
      f"--model_dir={tmp_path / 'model'}"], ps=2,
                timeout=500, env=env, check=False)
  output = proc.stdout + proc.stderr
  assert proc.returncode != 0
  assert re.search(r"do not fit: ps task ps:\d holds them under "
                   r"parameter_server, [\d.]+ MiB .* above the 8.0 MiB a task "
                   r"may hold .* add ps tasks", output), output[-3000:]
  assert tf.train.latest_checkpoint(str(tmp_path / "model")) is None


def test_a_table_every_replica_holds_is_refused_in_one_line_under_mirrored(
    tmp_path):
  # mirrored's autograph once wrapped the refusal in a StagingError: a
  # traceback and exit 1 instead of the CLI's one line and exit 2.
  env = dict(worker_env(), ESTIMATOR_SCALE_TASK_MEMORY_BYTES=str(8 << 20))
  proc = run(CLI + [
      "train", "--model=wide_deep", "--distribution=mirrored",
      "--optimizer=adagrad", "--hparams=hash_bucket_size=20000",
      "--train_steps=5", f"--model_dir={tmp_path / 'model'}"],
             env=env, check=False)
  output = proc.stdout + proc.stderr
  assert proc.returncode == 2, output[-3000:]
  assert "Traceback" not in output, output[-3000:]
  (line,) = [l for l in output.splitlines() if "estimator-scale: error:" in l]
  assert "each worker of --distribution=mirrored holds all of them" in line
  assert tf.train.latest_checkpoint(str(tmp_path / "model")) is None

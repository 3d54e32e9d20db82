"""The parameter-server speed bench's arithmetic and page, on fake records.

What docs/PS_SPEED.md says rests on counting each trainer's runs inside one
wall window and on within-round ratios; both are checked here without
starting a job.
"""
import pytest

from tools.bench.ps_speed import job
from tools.bench.ps_speed import model
from tools.bench.ps_speed import render

SETTINGS = {"global_batch": 256, "threads": 1, "optimizer": "adagrad",
            "window_s": 10.0, "warmup_s": 5.0}
MACHINE = {"summary": "test box", "date": "today",
           "load_average_at_start": [0.5], "load_average_at_end": [1.5]}


def test_commands_differ_by_launcher_and_ps_sync_only():
  one, asynchronous, sync = (job.command(mode, SETTINGS, "/m")
                             for mode in job.MODES)
  assert "--distribution=parameter_server" not in one
  assert "estimator_scale.launcher" not in one
  for argv in (asynchronous, sync):
    launcher = argv[:argv.index("--")]
    assert launcher[-4:] == ["--workers", "1", "--ps", "1"]
    assert argv[argv.index("--") + 1:argv.index("--") + 1 + len(one)] == one
  assert "--ps_sync" in sync and "--ps_sync" not in asynchronous
  assert "--global_batch_size=256" in one and "--intra_op_threads=1" in one
  with pytest.raises(ValueError, match="mode='two'"):
    job.command("two", SETTINGS, "/m")


def test_a_run_consumes_its_trainers_share_of_the_global_batch():
  assert job.batch_per_run("one", 256) == 256
  assert job.batch_per_run("async", 256) == 128
  assert job.batch_per_run("sync", 256) == 128


def test_window_waits_for_every_trainer_and_counts_runs_inside_it(tmp_path):
  (tmp_path / "chief:0.runs").write_text("100.0 0\n101.0 1\n107.0 3\n")
  assert job.window(job.read_runs(str(tmp_path)), 2, 5.0, 10.0) is None
  (tmp_path / "worker:0.runs").write_text(
      "103.0 1\n108.0 4\n109.0 5\n118.0 9\n119.0 10\n")
  runs = job.read_runs(str(tmp_path))
  bounds = job.window(runs, 2, 5.0, 10.0)
  assert bounds == (108.0, 118.0)  # the later first run + the warm-up
  figures = job.measure(runs, bounds, 256)
  # A run ending at the window's start belongs to the warm-up.
  assert figures["runs_by_task"] == {"chief:0": 0, "worker:0": 2}
  assert figures["examples_per_sec"] == pytest.approx(2 * 256 / 10.0)
  assert figures["global_steps"] == 4
  assert figures["seconds"] == 10.0


def test_task_name_reads_tf_config():
  assert model.task_name(None) == "chief:0"
  assert model.task_name('{"task": {"type": "worker", "index": 3}}') == (
      "worker:3")


def _rates(*values):
  return [v and {"examples_per_sec": v, "runs_by_task": {"chief:0": 7},
                 "global_steps": 7} for v in values]


def _result(smoke=False):
  return {"machine": MACHINE, "settings": SETTINGS, "rounds": 3,
          "smoke": smoke, "samples": {"one": _rates(100, 200, 100),
                                      "async": _rates(80, 120, None),
                                      "sync": _rates(50, 120, 60)}}


def test_ratios_are_medians_of_within_round_ratios():
  result = _result()
  assert render.ratio(result, "sync", "one") == (0.6, [0.5, 0.6, 0.6])
  # A failed round drops that round's ratio only.
  assert render.ratio(result, "async", "one") == (0.7, [0.8, 0.6])
  table = render.speed_table(result, "one")
  assert "| 1 process | 100 | 100, 200, 100 | - | - |" in table
  assert "| 100 | 80, 120, failed | 0.7 | 0.8, 0.6 |" in table


def test_page_from_fake_results_and_without_any():
  peer = {"machine": MACHINE, "model": "census", "global_batch": 256,
          "threads": 2, "warmup": 10, "steps": 300, "rounds": 1,
          "smoke": True, "samples": {"estimator_scale": _rates(110),
                                     "deepctr": _rates(100)}}
  text = render.page(_result(), peer)
  assert "| estimator_scale (census zoo model) | 110 | 110 | 1.1 | 1.1 |" in (
      text)
  assert text.count(render.SMOKE) == 1  # the peer's run only
  assert "test box" in text and "windows of 10 s" in text
  assert "| 2 | 1 process | chief:0 7 | 7 |" in text
  assert text.count("Not measured yet") == 0
  assert render.page(None, None).count("Not measured yet") == 2

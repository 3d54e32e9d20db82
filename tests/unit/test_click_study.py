"""The pure parts of the click study (tools/study/click_*.py): its grid,
the runs' schedules, and the tables, time to AUC and projection.

No training (the study is `make study-click`): these pin the bookkeeping
that docs/adascale/click_study.md's numbers pass through.
"""
import json
import math
import types

import pytest

from tools.study import click
from tools.study import click_plots
from tools.study import click_results
from tools.study import click_specs


def _settings(model="census", **kwargs):
  return click_specs.task_settings(model, 3, **kwargs)


def _one(method, scale, optimizer="adagrad", **kwargs):
  specs = click_specs.run_specs(_settings(), optimizer, method, (scale,),
                                **kwargs)
  assert [s["seed"] for s in specs] == [0, 1, 2]
  assert len(specs[0]["segments"]) == 1
  return specs[0]["segments"][0]


def test_each_method_derives_its_rate_and_length_from_s1():
  T = click_specs.TASKS["census"]["T"]
  base = _one("baseline", 1)
  assert (base["max_updates"], base["lr_scaling"]) == (T, "identity")
  assert base["schedule"]["lr_boundaries"] == (T // 2, T * 3 // 4)
  lsw = _one("LSW", 64)
  assert lsw["max_updates"] == math.ceil(T / 64) == 32
  assert lsw["lr_scaling"] == "linear" and lsw["warmup"] == 2
  assert lsw["schedule"]["lr_boundaries"] == (16, 24)
  assert _one("sqrt", 64)["lr_scaling"] == "sqrt"
  assert _one("identity", 64)["warmup"] == 0
  adascale = _one("AS", 64)
  assert adascale["tau"] == T and adascale["max_updates"] == T
  assert adascale["schedule"]["lr_boundaries"] == (T // 2, T * 3 // 4)
  seed = _one("seed000", 16)
  assert (seed["optimizer"], seed["lr_scaling"], seed["warmup"]) == (
      "adamw", "linear", 0)
  assert dict(seed["optimizer_options"]) == {"weight_decay": 0.01}
  assert seed["schedule"]["learning_rate"] == 0.003


def test_ftrl_trains_the_wide_part_adagrad_the_deep_one():
  segment = _one("AS", 64, optimizer="ftrl")
  assert (segment["optimizer"], segment["linear_optimizer"]) == (
      "adagrad", "ftrl")
  assert segment["schedule"]["learning_rate"] == (
      click_specs.TASKS["census"]["learning_rates"]["adagrad"])
  assert _one("AS", 64)["linear_optimizer"] is None
  assert _one("seed000", 16)["linear_optimizer"] is None


@pytest.mark.parametrize("model", sorted(click_specs.TASKS))
def test_every_task_has_every_optimizers_rate(model):
  specs = click_specs.all_specs(click_specs.task_settings(model, 1))
  assert {s["optimizer"] for s in specs} == {
      click_specs.MAIN_OPTIMIZER, *click_specs.OTHER_OPTIMIZERS}


def test_s_is_ranks_times_accumulation():
  segment = _one("AS", 64, ranks=(4,))
  assert (segment["ranks"], segment["accumulation_steps"]) == (4, 16)
  with pytest.raises(ValueError, match="ranks"):
    _one("AS", 8, ranks=(3,))


def test_elastic_rows_change_ranks_by_thirds():
  specs = click_specs.elastic(_settings())
  assert sorted({s["method"] for s in specs}) == ["AS", "LSW"]
  assert len(specs) == 6
  adascale = next(s for s in specs if s["method"] == "AS")
  assert [g["ranks"] for g in adascale["segments"]] == [2, 4, 2]
  assert [g["scale"] for g in adascale["segments"]] == [8, 16, 8]
  assert [g["accumulation_steps"] for g in adascale["segments"]] == [4] * 3
  T = click_specs.TASKS["census"]["T"]
  assert [g["tau"] for g in adascale["segments"]] == pytest.approx(
      [T / 3, 2 * T / 3, T])
  lsw = next(s for s in specs if s["method"] == "LSW")
  stops = [g["max_updates"] for g in lsw["segments"]]
  assert stops == [84, 126, 210]  # a third of T at S 8, 16, 8 each


def test_grid_runs_as_at_every_s_and_says_what_else():
  specs = click_specs.sweep(_settings())
  cells = {(s["optimizer"], s["method"], s["scales"][0]) for s in specs}
  for scale in click_specs.SCALES[1:]:
    assert ("adagrad", "AS", scale) in cells
  assert ("adagrad", "seed000", 1) in cells
  for method in ("LSW", "seed000", "identity"):  # judged beside AS
    assert all(("adagrad", method, s) in cells for s in click_specs.SCALES[1:])
  assert ("adagrad", "sqrt", 8) not in cells  # not run: the page says so
  assert ("adam", "AS", 64) in cells and ("adam", "AS", 8) not in cells
  assert {c for c in cells if c[0] == "ftrl"} == {
      ("ftrl", "baseline", 1), ("ftrl", "AS", 16), ("ftrl", "AS", 64),
      ("ftrl", "LSW", 16), ("ftrl", "LSW", 64)}
  assert len(specs) == 3 * len(cells)
  only = click_specs.sweep(_settings(methods=("AS",), scales=(64,),
                                     optimizers=("adagrad",)))
  assert {(s["method"], s["scales"]) for s in only} == {
      ("baseline", (1,)), ("AS", (64,))}


def test_timed_rows_put_as_on_1_2_4_ranks_one_seed():
  specs = click_specs.timed(_settings())
  assert {s["seed"] for s in specs} == {0}
  assert all(s["timed"] for s in specs)
  ranked = {(s["method"], s["ranks"][0]) for s in specs
            if s["method"] != "baseline"}
  assert ranked == {("AS", 1), ("AS", 2), ("AS", 4), ("LSW", 1),
                    ("seed000", 1)}
  lsw = next(s for s in specs if s["method"] == "LSW")
  assert lsw["segments"][0]["checkpoint_every"] == 4  # 32 updates / 8


@pytest.mark.parametrize("kwargs, message", [
    (dict(model="criteo"), "task="),
    (dict(optimizers=("lamb",)), "optimizer="),
    (dict(methods=("LARS",)), "method="),
    (dict(scales=(128,)), "scales="),
])
def test_bad_settings_name_the_argument(kwargs, message):
  with pytest.raises(ValueError, match=message):
    _settings(**kwargs)


def test_the_default_study_has_elastic_rows_on_both_tasks():
  assert click.parse_args([]).elastic_tasks == list(click_specs.TASKS)


def test_cli_refuses_bad_numbers():
  with pytest.raises(SystemExit):
    click.parse_args(["--scales", "0"])
  with pytest.raises(SystemExit):
    click.parse_args(["--seeds", "0"])


def _run(method, scale, seed, auc, optimizer="adagrad", **extra):
  return dict(dict(model="census", optimizer=optimizer, method=method,
                   scales=[scale], ranks=[1], seed=seed, timed=False, auc=auc,
                   loss=0.3, updates=100, tau=None, micro_batches=100 * scale,
                   wall_seconds=10.0, curve=[], trainable_bytes=4000),
              **extra)


def test_table_deltas_and_target():
  settings = _settings(optimizers=("adagrad",))
  runs = [_run("baseline", 1, s, a) for s, a in enumerate((0.90, 0.902))]
  runs += [_run("AS", 64, s, a) for s, a in enumerate((0.899, 0.9))]
  runs += [_run("AS", 8, s, 0.905) for s in range(2)]
  runs += [_run("seed000", 1, s, 0.89) for s in range(2)]
  runs += [_run("seed000", 16, s, 0.88) for s in range(2)]
  table = click_results.build_table(runs, settings)
  assert table["baselines"]["adagrad"]["auc_mean"] == pytest.approx(0.901)
  rows = {(r["method"], r["S"]): r for r in table["rows"]}
  assert rows[("AS", 64)]["auc_delta"] == pytest.approx(-0.0015)
  assert rows[("AS", 64)]["aucs"] == [0.899, 0.9]
  assert rows[("seed000", 16)]["auc_delta"] == pytest.approx(-0.01)
  assert rows[("seed000", 16)]["auc_delta_main"] == pytest.approx(-0.021)
  target = table["target"]
  assert target["as_within"] == {"adagrad S=8": False, "adagrad S=64": True}
  assert target["as_not_worse"] == {"adagrad S=8": True,
                                    "adagrad S=64": True}
  assert not target["met"] and target["met_not_worse"]
  page = click_plots.task_markdown(table)
  assert "**above** it: adagrad S=8 (+0.0040)" in page
  assert "| adagrad | 64 | 1024 |" in page
  assert "| 100 | 3.20 |" in page  # 100 updates x 64 samples over T = 2000


def test_judgement_says_which_way_and_puts_the_recipes_beside():
  settings = _settings(optimizers=("adagrad", "ftrl"))
  runs = [_run("baseline", 1, s, 0.9) for s in range(2)]
  runs += [_run("AS", 8, s, a, micro_batches=4000)
           for s, a in enumerate((0.905, 0.907))]
  runs += [_run("AS", 64, s, a) for s, a in enumerate((0.89, 0.894))]
  runs += [_run("LSW", 64, s, 0.8) for s in range(2)]
  runs += [_run("seed000", 1, s, 0.91) for s in range(2)]
  runs += [_run("seed000", 64, s, 0.88) for s in range(2)]
  runs += [_run("baseline", 1, s, 0.9, optimizer="ftrl") for s in range(2)]
  runs += [_run("AS", 64, s, 0.901, optimizer="ftrl") for s in range(2)]
  page = click_plots.judgement_markdown(
      click_results.build_table(runs, settings))
  assert ("| 8 | 0.9060 ± 0.0014 | +0.0060 | no, above (2.0× the examples) "
          "| — | — | — | — |") in page  # 4000 micro-batches over T = 2000
  assert ("| 64 | 0.8920 ± 0.0028 | -0.0080 | no, below (seeds ± 0.0028) | "
          "-0.1000 | -0.0300 (-0.0200) | — | — |") in page
  assert ("| ftrl | 64 | 0.9000 ± 0.0000 | 0.9010 ± 0.0000 | +0.0010 | yes "
          "| — |") in page


def test_merge_appends_only_the_runs_missing(tmp_path):
  main, batch = tmp_path / "runs.jsonl", tmp_path / "batch.jsonl"
  old = [_run("baseline", 1, s, 0.9) for s in range(3)]
  new = [_run("LSW", 2, s, 0.89) for s in range(3)]
  main.write_text("".join(json.dumps(r) + "\n" for r in old))
  # A batch resumed from a copy of the main log: the old runs, then its own.
  batch.write_text("".join(json.dumps(r) + "\n" for r in old + new))
  merged = click.merge_runs(str(main), [str(batch)])
  assert merged == old + new
  assert click_results.read_runs(str(main)) == old + new
  assert click.merge_runs(str(main), [str(batch)]) == old + new  # idempotent


def test_study_json_keeps_the_tasks_this_invocation_did_not_name():
  args = click.parse_args(["--tasks", "census", "--optimizers", "adam",
                           "--scales", "64"])
  tasks = click.study_tasks(args, [_run("baseline", 1, 0, 0.9),
                                   dict(_run("AS", 2, 0, 0.7),
                                        model="movielens")])
  assert [t["model"] for t in tasks] == ["census", "movielens"]
  assert all(t["scales"] == click_specs.SCALES for t in tasks)
  assert tasks[0]["optimizers"] == (click_specs.MAIN_OPTIMIZER,
                                    *click_specs.OTHER_OPTIMIZERS)


def test_time_to_auc_and_projection():
  curve = [(8, 5.0, 0.85), (16, 9.0, 0.899), (24, 13.0, 0.91)]
  assert click_results.time_to(curve, 0.899) == (16, 9.0)
  assert click_results.time_to(curve, 0.95) == (None, None)
  run = _run("AS", 64, 0, 0.91, timed=True, curve=curve)
  assert click_results.compute_per_micro_batch(run) == pytest.approx(
      8.0 / (16 * 64))
  compute = 1e-3
  times = [click_results.projected_seconds(100, compute, 4e6, h)
           for h in (1, 8, 64)]
  assert times[0] == pytest.approx(100 * 64 * compute)  # no exchange
  assert times[1] < times[0] and times[2] < times[1]
  runs = [_run("baseline", 1, 0, 0.9), run]
  timed = click_results.build_table(
      runs, _settings(optimizers=("adagrad",)))["timed"]
  assert timed["target_auc"] == pytest.approx(0.899)
  row = timed["rows"][0]
  assert (row["updates_to_target"], row["seconds_to_target"]) == (16, 9.0)
  assert set(row["projected_seconds"]) == {"8", "16", "32", "64"}


def test_commands_name_every_cell():
  table = {"model": "movielens", "rows": [
      {"optimizer": "adagrad", "method": "AS", "S": 2},
      {"optimizer": "adagrad", "method": "AS", "S": 64}]}
  line = click_plots.commands({"tasks": [table]})
  assert line == click_plots.CELL_COMMAND.format(
      task="movielens", optimizer="adagrad", method="AS", S="2 64")
  args = click.parse_args(line.split()[3:])
  assert (args.tasks, args.methods, args.scales) == (
      ["movielens"], ["AS"], [2, 64])


def test_a_run_stops_when_its_checkpoints_would_fill_its_share_of_disk(
    tmp_path, monkeypatch):
  from tools.study import click_runs  # pylint: disable=import-outside-toplevel
  (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-5"\n')
  (tmp_path / "model.ckpt-5.index").write_bytes(b"i" * 100)
  (tmp_path / "model.ckpt-5.data-00000-of-00001").write_bytes(b"d" * 900)
  monkeypatch.setattr(click_runs.shutil, "disk_usage",
                      lambda path: types.SimpleNamespace(free=7_000))
  # 7 more checkpoints of 1,000 bytes fit in the 7,000 free bytes; 6 more
  # do not fit in half of them, where two runs share the disk.
  monkeypatch.setattr(click_runs, "_runs_at_once", 1)
  click_runs.check_disk(str(tmp_path), 7)
  monkeypatch.setattr(click_runs, "_runs_at_once", 2)
  with pytest.raises(RuntimeError, match=r"keeps 6 more checkpoints of "
                     r"0.00 GiB or more .* \(2 runs at once\)"):
    click_runs.check_disk(str(tmp_path), 6)

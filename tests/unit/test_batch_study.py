"""The pure parts of the large-batch study (tools/study/batch*.py): the
grid, each method's rule and length, and the table, the examples to the
target and the projection the page prints.

No training (the study is `python -m tools.study.batch`): these pin the
bookkeeping that docs/adascale/batch_study.md's numbers pass through.
"""
import math
import os

import pytest

from estimator_scale.train_ops import scaling
from tests.helpers import docs
from tools import repo
from tools.study import batch
from tools.study import batch_plots
from tools.study import batch_results
from tools.study import batch_specs
from tools.study import click_plots
from tools.study import click_results

T = batch_specs.T
TABLES = 26 * batch_specs.TABLE_ROWS * (32 + 4)
"""The bytes of the study model's dynamic tables and wide weights."""


def _segment(method, scale, optimizer="adagrad"):
  return batch_specs.run_spec(optimizer, method, scale)["segments"][0]


def test_each_method_takes_its_rule_and_length():
  assert T == 9766
  base = _segment("baseline", 1)
  assert (base["max_updates"], base["lr_scaling"], base["tau"]) == (
      T, "identity", None)
  assert base["schedule"]["lr_boundaries"] == (round(T / 2),
                                               round(T * 3 / 4))
  epoch = math.ceil(T / 128)
  for method, rule in (("identity", "identity"), ("LSW", "linear"),
                       ("sqrt", "sqrt"), ("CowClip", "cowclip")):
    segment = _segment(method, 128)
    assert (segment["lr_scaling"], segment["max_updates"]) == (rule, epoch)
    assert segment["adascale_parts"] == "all"
    assert segment["schedule"]["lr_boundaries"] == (round(epoch / 2),
                                                    round(epoch * 3 / 4))
  assert _segment("LSW", 128)["warmup"] == 5
  assert _segment("CowClip", 128)["warmup"] == 0
  for method, parts in (("AS", "all"), ("AS-parts", "embeddings,dense")):
    segment = _segment(method, 128)
    assert segment["lr_scaling"] == "adascale"
    assert segment["adascale_parts"] == parts
    # Stops at tau = T, or at CAP times the S = 1 run's examples.
    assert segment["tau"] == T
    assert segment["max_updates"] == batch_specs.CAP * epoch
    assert segment["schedule"]["lr_boundaries"] == base["schedule"][
        "lr_boundaries"]
  # About CHECKPOINTS checkpoints per epoch's worth of examples.
  assert _segment("AS", 128)["checkpoint_every"] == math.ceil(epoch / 8)
  assert base["checkpoint_every"] == math.ceil(T / 8)


def test_the_runs_read_the_raw_id_logs_in_dynamic_tables():
  spec = batch_specs.run_spec("adagrad", "AS", 64)
  assert spec["model"] == "wide_deep" and spec["timed"]
  assert spec["hparams"]["embedding"] == "dynamic"
  assert spec["hparams"]["raw_ids"] == 1
  assert spec["hparams"]["train_rows"] >= 5_000_000
  assert spec["micro_batch_size"] == 512
  assert batch_specs.examples(spec) == 64 * 512


def test_the_grid_holds_every_cell_once_and_checks_its_choices():
  specs = batch_specs.grid()
  cells = [(s["method"], s["scales"][0]) for s in specs]
  assert len(cells) == len(set(cells)) == 1 + 6 * 4
  assert cells[0] == ("baseline", 1)
  ordered = [(s["method"], s["scales"][0])
             for s in sorted(specs, key=batch_specs.priority)]
  assert ordered[:4] == [("baseline", 1), ("AS", 128), ("AS-parts", 128),
                         ("identity", 128)]
  assert ordered[-1] == ("CowClip", 8)
  for adam in ("adam", "lazy_adam"):
    runs = batch_specs.grid((adam,))
    assert {s["scales"][0] for s in runs} == {1, 64, 128}
    assert {s["segments"][0]["optimizer"] for s in runs} == {adam}
  with pytest.raises(ValueError, match="method='LARS'"):
    batch_specs.grid(methods=("LARS",))
  with pytest.raises(ValueError, match="scale=16"):
    batch_specs.grid(scales=(16,))
  with pytest.raises(ValueError, match="baseline runs at S = 1 only"):
    batch_specs.run_spec("adagrad", "AS", 1)


def _run(method, scale, auc, curve, updates, tau=None, seed=0):
  return dict(model="wide_deep", optimizer="adagrad", method=method,
              scales=[scale], ranks=[1], seed=seed, timed=True, auc=auc,
              loss=0.5, updates=updates, tau=tau,
              micro_batches=updates * scale, wall_seconds=10.0,
              curve=curve, trainable_bytes=4_000_000 + TABLES)


def _runs():
  base = _run("baseline", 1, 0.780, [(2000, 10.0, 0.770),
                                     (6000, 30.0, 0.779), (T, 50.0, 0.780)],
              T)
  epoch = math.ceil(T / 128)
  # Reaches 0.779 at its second checkpoint; stopped by the cap (tau < T).
  adascale = _run("AS", 128, 0.7795, [(40, 1.0, 0.76), (80, 2.0, 0.7792),
                                      (3 * epoch, 5.0, 0.7795)],
                  3 * epoch, tau=5000.0)
  identity = _run("identity", 128, 0.70, [(epoch, 1.0, 0.70)], epoch)
  return [base, adascale, identity]


def test_rows_count_examples_to_the_target_and_where_the_cap_bound():
  study = batch_results.build_study(_runs())
  entry = study["optimizers"]["adagrad"]
  rows = {r["method"]: r for r in entry["rows"]}
  adascale = rows["AS"]
  assert adascale["examples_to_target"] == 80 * 128 * 512
  assert adascale["to_target_ratio"] == pytest.approx(
      80 * 128 / 6000)
  assert adascale["cap_bound"] and adascale["within"]
  assert adascale["auc_delta"] == pytest.approx(-0.0005)
  assert adascale["examples_ratio"] == pytest.approx(
      3 * math.ceil(T / 128) * 128 / T)
  assert rows["identity"]["examples_to_target"] is None
  assert not rows["identity"]["within"]
  assert entry["baseline"]["examples_to_target"] == 6000 * 512
  assert "LSW S=128" in entry["missing"] and "AS S=128" not in entry[
      "missing"]
  assert batch_plots.best_of(
      [r for r in entry["rows"] if r["scale"] == 128])["method"] == "AS"
  # The S = 1 run's compute: 40 s over 7,766 micro-batches.
  assert entry["compute_ms"] == pytest.approx(40e3 / (T - 2000))
  assert entry["dense_bytes"] == 4_000_000


def test_more_hosts_cost_less_compute_and_more_exchange():
  compute = 0.02
  one = batch_results.projected_seconds(100, 128, compute, 4e6, 1)
  assert one == pytest.approx(100 * 128 * compute)
  eight = batch_results.projected_seconds(100, 128, compute, 4e6, 8)
  assert 100 * 16 * compute < eight < one
  # Past S hosts, each host computes a smaller share, and the table
  # traffic per example stays: the time stops falling in proportion.
  many = batch_results.projected_seconds(100, 128, compute, 4e6, 256)
  assert many > 100 * compute / 2
  link = batch_results.scaling_model.Link(bandwidth=1e9, latency=0.0)
  assert batch_results.alltoall_seconds(512, 2, link) == pytest.approx(
      512 * 26 * (8 + 64) / 2 / 1e9)
  assert batch_results.allgather_seconds(512, 3, link) == pytest.approx(
      2 * 512 * 26 * 12 / 1e9)


def test_the_page_renders_every_row_and_the_figure(tmp_path):
  study = batch_results.build_study(_runs(), 3600, 2)
  paths = batch_results.write_outputs(str(tmp_path), str(tmp_path), study)
  page = (tmp_path / batch_plots.PAGE).read_text()
  assert "| 128 | 65,536 | AS | 0.7795 | -0.0005 within |" in page
  assert "| 128 | 65,536 | identity | 0.7000 | -0.0800 below |" in page
  assert "(cap)" in page and "never" in page
  assert "**AS** reached 0.7790" in page
  assert "batch_auc_adagrad.png" in page
  assert any(p.endswith("batch_auc_adagrad.png") for p in paths)
  assert (tmp_path / "batch_auc_adagrad.png").stat().st_size > 0


def test_cells_are_held_to_the_mean_of_the_baselines_seeds(tmp_path):
  # Seed 1's baseline ends higher: the mean (0.781) puts the AS cell, 0.7795,
  # 0.0015 below it, outside the margin it was within against seed 0 alone.
  second = _run("baseline", 1, 0.782, [(T, 50.0, 0.782)], T, seed=1)
  study = batch_results.build_study(_runs() + [second])
  entry = study["optimizers"]["adagrad"]
  assert entry["baseline"]["auc"] == pytest.approx(0.781)
  assert entry["baseline"]["seeds"] == 2
  cell = next(r for r in entry["rows"] if r["method"] == "AS")
  assert cell["auc_delta"] == pytest.approx(-0.0015)
  assert not cell["within"]
  page = batch_plots.markdown(study)
  assert "AUC 0.7810 (the mean of 2 seeds, 0.7800 to 0.7820)" in page
  assert "but for the S = 1 baselines (adagrad 2)" in page
  assert "wider than the ±0.001 margin (adagrad 0.0020)" in page
  assert batch.parse_args(["--methods"]).methods == []
  assert [s["method"] for s in batch_specs.grid(methods=(), seeds=2)] == [
      "baseline", "baseline"]


def test_a_sweep_of_some_cells_keeps_the_other_cells_runs():
  held = _runs()
  grid = batch_specs.grid(methods=("AS",), scales=(128,))
  kept = batch.kept_runs(held, grid, resume=False)
  assert [(r["method"], r["scales"]) for r in kept] == [("identity", [128])]
  assert batch.kept_runs(held, grid, resume=True) == held


def test_the_committed_page_renders_from_the_committed_runs():
  # A study run without --resume starts runs.jsonl anew: committed so, it
  # would leave the page showing runs no longer on record.
  runs = click_results.read_runs(os.path.join(
      docs.ROOT, "tools", "study", "results", "batch", "runs.jsonl"))
  with open(os.path.join(docs.DOCS, "adascale", batch_plots.PAGE)) as f:
    assert f.read() == batch_plots.markdown(batch_results.build_study(runs))


def test_the_command_line_checks_its_numbers():
  with pytest.raises(SystemExit):
    batch.parse_args(["--seeds", "0"])
  with pytest.raises(SystemExit):
    batch.parse_args(["--scales", "16"])
  assert batch.parse_args([]).methods == list(batch_specs.METHODS)


def test_the_warning_names_the_largest_s_the_studies_showed():
  held = batch_results.held_up_to(
      repo.load_json(os.path.join(click_plots.RESULTS, "study.json")),
      repo.load_json(os.path.join(batch_plots.RESULTS, "study.json")))
  assert held == scaling.HELD_UP_TO

"""The pure parts of tools/adascale_study.py: schedules, orchestration, table.

No training here (the study itself is `make study`); these pin the
bookkeeping a wrong number in docs/ADASCALE.md would come from.
"""
import json
import math

import pytest

from tools import adascale_study as study
from tools import study_plots

SETTINGS = dict(model="digits_mlp", T=20000, scales=[1, 4, 32], seeds=3,
                micro_batch_size=8, learning_rate=0.05, momentum=0.9,
                decay_fractions=(0.5, 0.75), decay_rate=0.1,
                warmup_fraction=0.055, accuracy_points=1.0, threads=1,
                workers=1)


def _one(method, scale, **kwargs):
  specs = study.run_specs(SETTINGS, method, scale, **kwargs)
  assert [s["seed"] for s in specs] == [0, 1, 2]
  return specs[0]


def test_baseline_and_adascale_keep_the_s1_schedule():
  for method, rule in (("baseline", "identity"), ("AS", "adascale")):
    spec = _one(method, 1 if method == "baseline" else 32)
    assert spec["boundaries"] == (10000, 15000)
    assert spec["max_updates"] == 20000  # AS stops earlier, at tau >= T
    assert spec["warmup"] == 0 and spec["lr_scaling"] == rule


def test_lsw_schedule_is_scaled_to_ceil_t_over_s():
  spec = _one("LSW", 32)
  assert spec["max_updates"] == 625 == math.ceil(20000 / 32)
  assert spec["boundaries"] == (312, 469)  # round(0.5 * 625), round(0.75 * 625)
  assert spec["warmup"] == 35  # ceil(5.5% of 625)
  assert spec["lr_scaling"] == "linear" and spec["accumulation_steps"] == 32
  assert _one("LSW", 3)["max_updates"] == 6667  # ceil, not floor


def test_lsw_plus_is_scaled_to_the_adascale_updates():
  spec = _one("LSW+", 32, as_updates=1000)
  assert spec["max_updates"] == 1000
  assert spec["boundaries"] == (500, 750)
  assert spec["warmup"] == 55
  assert _one("LSW+", 1, as_updates=20000)["warmup"] == 0  # S = 1: no scaling


def test_horovod_spreads_only_scales_the_ranks_divide():
  assert _one("AS", 1, workers=2)["distribution"] == "none"
  spread = _one("AS", 4, workers=2)
  assert spread["distribution"] == "horovod"
  assert spread["accumulation_steps"] == 2
  assert _one("AS", 4)["accumulation_steps"] == 4


def test_warmup_is_at_least_one_update():
  assert study.warmup_updates(2, 0.055) == 1
  assert study.decay_boundaries(3, (0.1, 0.5)) == (1, 2)


def test_adascale_lr_reads_the_schedule_before_the_update():
  # tau went 9998 -> 10002 with gain 4: the lr used floor(9998), before decay.
  assert study.adascale_lr(4.0, 10002.0, 0.05, (10000, 15000), 0.1) == \
      pytest.approx(0.2)
  assert study.adascale_lr(4.0, 10006.0, 0.05, (10000, 15000), 0.1) == \
      pytest.approx(0.02)
  assert study.base_lr(15000, 0.05, (10000, 15000), 0.1) == \
      pytest.approx(0.0005)


def test_mean_std_is_the_sample_std():
  assert study.mean_std([1, 2, 3]) == (2.0, 1.0)
  assert study.mean_std([97.5]) == (97.5, 0.0)


def _result(method, scale, seed, accuracy, updates):
  return dict(method=method, scale=scale, seed=seed, accuracy=accuracy,
              test_loss=0.1, train_loss=1e-4 * (seed + 1), updates=updates,
              tau=None, wall_seconds=2.0 + seed,
              trace=[(float(i * scale), float(scale), 0.05 * scale)
                     for i in range(1, 4)] if method == "AS" else [])


def _fake_runner(accuracy):
  """Trains nothing: results from the specs, as train_run would return."""
  seen = []

  def run(specs):
    seen.append(specs)
    return [_result(s["method"], s["scale"], s["seed"],
                    accuracy(s["method"], s["scale"], s["seed"]),
                    s["max_updates"] if s["method"] != "AS"
                    else 2 * math.ceil(20000 / s["scale"]) + s["seed"])
            for s in specs]
  return run, seen


def test_run_study_runs_lsw_plus_after_as_with_its_mean_updates():
  run, seen = _fake_runner(lambda method, scale, seed: 97.0)
  results = study.run_study(SETTINGS, run)
  assert len(seen) == 2
  assert {s["method"] for s in seen[1]} == {"LSW+"}
  plus = {s["scale"]: s["max_updates"] for s in seen[1]}
  assert plus[32] == 2 * 625 + 1  # mean of 1250, 1251, 1252
  assert len(results) == 3 + 3 * 3 * 3


def test_table_json_markdown_and_target():
  def accuracy(method, scale, seed):
    return {"AS": 97.0, "LSW": 90.0}.get(method, 97.5) + seed * 0.5
  run, _ = _fake_runner(accuracy)
  results = study.run_study(SETTINGS, run)
  table = json.loads(json.dumps(study.build_table(results, SETTINGS)))
  assert table["model"] == "digits_mlp" and table["T"] == 20000
  assert table["baseline"]["accuracy_mean"] == pytest.approx(98.0)
  assert table["baseline"]["accuracy_std"] == pytest.approx(0.5)
  assert [(r["S"], r["method"]) for r in table["rows"]][:3] == [
      (1, "AS"), (1, "LSW"), (1, "LSW+")]
  for row in table["rows"]:
    assert {"S", "method", "total_batch", "accuracy_mean", "accuracy_std",
            "train_loss", "updates", "wall_seconds"} <= set(row)
  as32 = next(r for r in table["rows"] if r["S"] == 32 and r["method"] == "AS")
  assert as32["total_batch"] == 256
  assert as32["accuracy_delta"] == pytest.approx(-0.5)
  assert as32["updates"] == pytest.approx(1251)
  assert as32["train_loss"] == pytest.approx(2e-4)
  target = table["target"]
  assert target["as_updates_limit"] == 1250 and not target["met"]
  assert all(target["as_accuracy_within"].values())
  text = study_plots.markdown(table)
  assert "| 1 | 8 | baseline | 98.00 ± 0.50 |" in text
  assert "| 32 | 256 | LSW | 90.50 ± 0.50 |" in text
  assert "Met: **no**" in text


def test_render_writes_png_figures(tmp_path):
  run, _ = _fake_runner(lambda method, scale, seed: 97.0 if method == "AS"
                        else 10.0)
  results = study.run_study(SETTINGS, run)
  table = study.build_table(results, SETTINGS)
  paths = study.write_outputs(str(tmp_path), table, study.traces_of(results))
  names = sorted(p.rsplit("/", 1)[-1] for p in paths)
  assert names == ["accuracy.png", "gain.png", "lr.png", "study.json",
                   "study.md", "traces.json"]
  for name in ("accuracy.png", "gain.png", "lr.png"):
    assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  traces = json.loads((tmp_path / "traces.json").read_text())
  assert [(t["S"], t["seed"]) for t in traces][:2] == [(1, 0), (1, 1)]

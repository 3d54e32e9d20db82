"""The pure parts of the study (tools/study/specs.py, results.py): schedules,
orchestration, table.

No training here (the study itself is `make study`); these pin the
bookkeeping a wrong number in docs/adascale/study.md would come from.
"""
import json
import math

import pytest

from tools.study import plots as study_plots
from tools.study import results as study_results
from tools.study import specs as study

SETTINGS = dict(model="digits_mlp", T=20000, scales=[1, 4, 32], seeds=3,
                micro_batch_size=8, learning_rate=0.05, momentum=0.9,
                decay_fractions=(0.5, 0.75), decay_rate=0.1,
                warmup_fraction=0.055, lars_learning_rate=2.0,
                lars_trust_coefficient=0.001, lars_power=2.0,
                accuracy_points=1.0, updates_limit_S=32, threads=1, workers=1,
                elastic=[(8, 16, 32), (32, 16, 8)])


def _specs(method, scales, **kwargs):
  specs = study.run_specs(SETTINGS, method, scales, **kwargs)
  assert [s["seed"] for s in specs] == [0, 1, 2]
  return specs[0]


def _one(method, scale, **kwargs):
  spec = _specs(method, (scale,), **kwargs)
  assert len(spec["segments"]) == 1
  return spec["segments"][0]


def test_baseline_and_adascale_keep_the_s1_schedule():
  for method, rule in (("baseline", "identity"), ("AS", "adascale")):
    segment = _one(method, 1 if method == "baseline" else 32)
    assert segment["schedule"]["lr_boundaries"] == (10000, 15000)
    assert segment["max_updates"] == 20000  # AS stops earlier, at tau >= T
    assert segment["tau"] == (20000 if method == "AS" else None)
    assert segment["warmup"] == 0 and segment["lr_scaling"] == rule


def test_lsw_schedule_is_scaled_to_ceil_t_over_s():
  segment = _one("LSW", 32)
  assert segment["max_updates"] == 625 == math.ceil(20000 / 32)
  assert segment["schedule"]["lr_boundaries"] == (312, 469)  # 0.5, 0.75 of 625
  assert segment["warmup"] == 35  # ceil(5.5% of 625)
  assert segment["lr_scaling"] == "linear"
  assert segment["accumulation_steps"] == 32
  assert _one("LSW", 3)["max_updates"] == 6667  # ceil, not floor


def test_lsw_plus_is_scaled_to_the_adascale_updates():
  segment = _one("LSW+", 32, as_updates=1000)
  assert segment["max_updates"] == 1000
  assert segment["schedule"]["lr_boundaries"] == (500, 750)
  assert segment["warmup"] == 55


def test_lars_follows_the_resnet_recipe():
  segment = _one("LARS", 32)
  assert segment["optimizer"] == "lars"
  assert dict(segment["optimizer_options"]) == {
      "momentum": 0.9, "trust_coefficient": 0.001}
  assert segment["schedule"] == dict(
      lr_schedule="polynomial", learning_rate=2.0, lr_decay_steps=625,
      lr_power=2.0, warmup_steps=35)  # warm-up from 0 inside the schedule...
  assert segment["lr_scaling"] == "linear" and segment["warmup"] == 0  # x S
  assert _one("LARS", 1)["schedule"]["warmup_steps"] == 1100


def test_elastic_adascale_stops_each_segment_at_a_third_of_tau():
  spec = _specs("AS", (8, 16, 32))
  assert [s["accumulation_steps"] for s in spec["segments"]] == [8, 16, 32]
  assert [s["tau"] for s in spec["segments"]] == pytest.approx(
      [20000 / 3, 40000 / 3, 20000])
  assert {s["schedule"]["lr_boundaries"] for s in spec["segments"]} == {
      (10000, 15000)}  # tau reads the S = 1 schedule whatever S is


def test_elastic_lsw_decays_at_the_baselines_progress():
  rising = _specs("LSW", (8, 16, 32))["segments"]
  assert study.elastic_updates(20000, (8, 16, 32)) == [834, 417, 209]
  assert [s["max_updates"] for s in rising] == [834, 1251, 1460]
  # 10000 = 834 x 8 + 208 x 16;  15000 = 834 x 8 + 417 x 16 + 51.75 x 32
  assert rising[0]["schedule"]["lr_boundaries"] == (1042, 1303)
  assert {s["warmup"] for s in rising} == {81}  # 5.5% of 1460, from step 0
  falling = _specs("LSW", (32, 16, 8))["segments"]
  assert [s["max_updates"] for s in falling] == [209, 626, 1460]
  assert falling[0]["schedule"]["lr_boundaries"] == (416, 831)


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
  assert study_results.mean_std([1, 2, 3]) == (2.0, 1.0)
  assert study_results.mean_std([97.5]) == (97.5, 0.0)


def _result(spec, accuracy):
  method, scales, seed = spec["method"], spec["scales"], spec["seed"]
  perfect = math.ceil(20000 / scales[-1])  # AS at S = 32 takes twice that
  updates = (perfect * (2 if scales == (32,) else 1) + seed if method == "AS"
             else spec["segments"][-1]["max_updates"])
  return dict(model=spec["model"], method=method, scales=scales, seed=seed,
              accuracy=accuracy(method, scales, seed), test_loss=0.1,
              train_loss=1e-4 * (seed + 1), updates=updates, tau=None,
              wall_seconds=2.0 + seed,
              trace=[(float(i * scales[0]), float(scales[0]),
                      0.05 * scales[0]) for i in range(1, 4)]
              if method == "AS" else [])


def _fake_runner(accuracy):
  """Trains nothing: results from the specs, as train_run would return."""
  seen = []

  def run(specs):
    seen.append(specs)
    return [_result(s, accuracy) for s in specs]
  return run, seen


def test_run_study_runs_lsw_plus_after_as_with_its_mean_updates():
  run, seen = _fake_runner(lambda method, scales, seed: 97.0)
  results = study.run_study([SETTINGS], run)
  assert len(seen) == 2
  assert {s["method"] for s in seen[1]} == {"LSW+"}
  plus = {s["scales"]: s["segments"][0]["max_updates"] for s in seen[1]}
  assert plus == {(4,): 5000 + 1, (32,): 2 * 625 + 1}  # mean of 3 seeds
  # baseline; AS, LARS at 3 S; LSW at 2; 2 elastic x (AS, LSW); LSW+ at 2
  assert len(results) == 3 * (1 + 3 + 3 + 2 + 4 + 2)


def test_table_json_markdown_and_target():
  def accuracy(method, scales, seed):
    if scales == (32, 16, 8) and method == "AS":
      return 95.0
    return {"AS": 97.0, "LSW": 90.0}.get(method, 97.5) + seed * 0.5
  run, _ = _fake_runner(accuracy)
  results = study.run_study([SETTINGS], run)
  table = json.loads(json.dumps(study_results.build_table(results, SETTINGS)))
  assert table["model"] == "digits_mlp" and table["T"] == 20000
  assert table["baseline"]["accuracy_mean"] == pytest.approx(98.0)
  assert table["baseline"]["accuracy_std"] == pytest.approx(0.5)
  assert [(r["S"], r["method"]) for r in table["rows"]][:3] == [
      ("1", "AS"), ("1", "LARS"), ("4", "AS")]
  for row in table["rows"]:
    assert {"S", "method", "total_batch", "accuracy_mean", "accuracy_std",
            "train_loss", "updates", "wall_seconds", "elastic"} <= set(row)
  as32 = next(r for r in table["rows"] if r["S"] == "32" and r["method"] == "AS")
  assert as32["total_batch"] == "256"
  assert as32["accuracy_delta"] == pytest.approx(-0.5)
  assert as32["updates"] == pytest.approx(1251)
  assert as32["train_loss"] == pytest.approx(2e-4)
  falling = next(r for r in table["rows"]
                 if r["S"] == "32→16→8" and r["method"] == "AS")
  assert falling["elastic"] and falling["total_batch"] == "256→128→64"
  target = table["target"]
  assert target["as_updates_limits"] == {"1": 40000, "4": 10000, "32": 1250}
  assert target["as_updates_within"]["4"] and not target["as_updates_within"][
      "32"]
  assert target["as_accuracy_within"]["32"]
  assert not target["as_accuracy_within"]["32→16→8"] and not target["met"]
  text = study_plots.markdown({"tasks": [table], "study_wall_seconds": 60.0,
                               "processes": 2, "workers": 1})
  assert "| 1 | 8 | baseline | 98.00 ± 0.50 |" in text
  assert "| 32 | 256 | LSW | 90.50 ± 0.50 |" in text
  assert "| 32→16→8 | 256→128→64 | AS | 95.00 ± 0.00 |" in text
  assert "missed at S = 32→16→8" in text and "over at S = 32" in text
  assert "Met: **no**" in text


def test_render_writes_png_figures(tmp_path):
  run, _ = _fake_runner(lambda method, scales, seed: 97.0 if method == "AS"
                        else 10.0)
  results = study.run_study([SETTINGS], run)
  table = study_results.build_table(results, SETTINGS)
  study_json = {"tasks": [table], "study_wall_seconds": 1.0, "processes": 2,
                "workers": 1}
  paths = study_results.write_outputs(str(tmp_path), str(tmp_path), study_json,
                                      study_results.traces_of(results))
  names = sorted(p.rsplit("/", 1)[-1] for p in paths)
  figures = [f"{f}_digits_mlp.png" for f in study_plots.FIGURES]
  assert names == sorted(figures + ["study.json", "study.md", "traces.json"])
  for name in figures:
    assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  traces = json.loads((tmp_path / "traces.json").read_text())
  assert [(t["S"], t["seed"]) for t in traces][:2] == [("1", 0), ("1", 1)]
  assert {t["S"] for t in traces} >= {"8→16→32", "32→16→8"}

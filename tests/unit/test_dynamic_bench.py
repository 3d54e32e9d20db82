"""The dynamic bench's page: ratios, verdicts and memory per id from a
results file (no training)."""
import copy

import pytest

from tools.bench.dynamic import __main__ as bench
from tools.bench.dynamic import render

MIB = 1 << 20


def _memory(capacity, base_mib, per_id):
  """A stream run: resident grows to base + capacity * per_id by the fill,
  then stays."""
  updates = 10 * capacity // 1024
  fill = capacity // 1024
  resident = [int(base_mib * MIB + min(i + 1, fill) * 1024 * per_id)
               for i in range(updates)]
  return {"resident_before": 0, "resident": resident, "batch": 1024,
          "dimension": 32, "slots": 1, "rows_in_use": capacity}


RESULT = {
    "machine": {"date": "2026-11-27 23:00 UTC", "summary": "2 cores",
                "load_average_at_start": [9.5, 8.0, 7.0],
                "load_average_at_end": [10.0, 9.0, 8.0]},
    "settings": {"train": 1000, "eval": 100, "rows": 64, "dimension": 8,
                 "batch": 32, "zipf_exponent": 1.05, "speed_steps": 10,
                 "memory_capacities": [4096, 16384], "columns": ["C1"]},
    "distinct_ids": 12345678,
    "quality": {
        "hashed": [{"auc": 0.700, "examples": 1000, "seconds": 1.0,
                    "rows_in_use": None}],
        "dynamic": [{"auc": 0.705, "examples": 1000, "seconds": 2.0,
                     "rows_in_use": 1000}],
        "dynamic_min_count_2": [{"auc": 0.7048, "examples": 1000,
                                 "seconds": 2.0, "rows_in_use": 400}]},
    "speed": {"hashed": [{"examples_per_sec": 1000.0},
                         {"examples_per_sec": 900.0},
                         {"examples_per_sec": 1100.0}],
              "dynamic": [{"examples_per_sec": 800.0},
                          {"examples_per_sec": 600.0}, None]},
    "memory": [_memory(4096, 300, 200), _memory(16384, 300, 200)],
    "tfra": None, "smoke": False}


def test_the_verdicts_follow_the_targets():
  text = render.page(RESULT)
  assert "AUC(dynamic) - AUC(hashed) = +0.0050 (target >= +0.002: met)" in (
      text)
  assert "holds 60.0% fewer rows (target >= 50%: met) at an AUC cost of " \
         "+0.0002" in text
  # Per round 1000/800 and 900/600; the failed third round is left out.
  assert "dynamic / hashed: 1.38x (per round 1.25, 1.50; target <= 1.3x: " \
         "**not met**)" in text
  assert "| 12,345,678 distinct" not in text and "12,345,678 distinct" in text
  assert "load average at the start 9.5, 8.0, 7.0" in text
  assert "Both dynamic runs fill every row" not in text
  full = copy.deepcopy(RESULT)
  for name in ("dynamic", "dynamic_min_count_2"):
    full["quality"][name][0]["rows_in_use"] = 64
  assert "holds 0.0% fewer rows (target >= 50%: **not met**)" in (
      render.page(full))
  assert "Both dynamic runs fill every row" in render.page(full)


def test_memory_per_id_is_the_difference_of_two_capacities():
  text = render.page(RESULT)
  # 200 bytes per id by construction; the bound is 1.5 x (8 + 4*32*2).
  assert render.bytes_bound(32, 1) == pytest.approx(396.0)
  assert "Resident bytes per admitted id: 200 steady, 200 peak" in text
  assert "moves resident memory at most 0.0% after the table first fills " \
         "(target within +-10%: met)" in text
  grown = copy.deepcopy(RESULT)
  grown["memory"][1]["resident"][-1] *= 1.2
  assert "at most 20.0%" in render.page(grown)
  assert "**not met**" in render.memory_fields(grown)["memory_verdict"]


def test_tfra_rows_compare_auc_and_examples_per_second():
  peer = copy.deepcopy(RESULT)
  peer["tfra"] = "0.7.2"
  peer["quality"]["tfra"] = [{"auc": 0.7035, "examples": 1000,
                              "seconds": 4.0, "rows_in_use": 5000}]
  peer["speed"]["tfra"] = [{"examples_per_sec": 400.0},
                           {"examples_per_sec": 1200.0}, None]
  text = render.page(peer)
  assert "AUC(dynamic) - AUC(TFRA) = +0.0015 (target within 0.001: " \
         "**not met**)" in text
  # Rounds: 800/400 = 2.0 and 600/1200 = 0.5; their median 1.25.
  assert "Examples/s, dynamic / TFRA: 1.25x (target >= 1.0x: met)" in text
  assert "| TFRA 0.7.2 `dynamic_embedding` (own Estimator path) | 0.7035 |" \
      in text


def test_rounds_of_seeds_give_each_seeds_auc_and_the_tfra_differences():
  seeded = copy.deepcopy(RESULT)
  seeded["tfra"] = "0.7.2"
  run = seeded["quality"]["dynamic"][0]
  seeded["quality"]["dynamic"] = [dict(run, auc=a) for a in (0.705, 0.702,
                                                             0.708)]
  seeded["quality"]["tfra"] = [dict(run, auc=a) for a in (0.703, 0.703,
                                                          0.704)]
  text = render.page(seeded)
  assert "| dynamic (`es.dynamic_embedding`) | 0.705 | +0.0050 | 1,000 " \
         "| 500 | 0.705, 0.702, 0.708 |" in text
  assert "AUC(dynamic) - AUC(TFRA) = +0.0020" in text
  assert "Seed by seed (the same seed draws both models' dense layers): " \
         "+0.0020, -0.0010, +0.0040." in text


def test_the_repeating_ids_ratio_is_said_beside_the_judged_one():
  repeating = copy.deepcopy(RESULT)
  repeating["settings"]["repeating"] = 20000
  repeating["speed"]["hashed_repeating"] = [{"examples_per_sec": 1000.0}] * 2
  repeating["speed"]["dynamic_repeating"] = [{"examples_per_sec": 500.0},
                                             {"examples_per_sec": 800.0}]
  text = render.page(repeating)
  assert "(each column folded to 20,000 ids" in text
  assert "dynamic / hashed: 1.62x (per round 2.00, 1.25)" in text
  assert "| dynamic, ids repeating | 650 |" in text
  # The judged ratio stays the drawn ids'.
  assert "dynamic / hashed: 1.38x (per round 1.25, 1.50; target" in text


def test_the_ids_a_column_evicts_an_update_are_said_with_the_ratio():
  assert "evicts" not in render.page(RESULT)  # runs from before it was kept
  churned = copy.deepcopy(RESULT)
  churned["speed"]["dynamic"][0]["evicted_per_update"] = 12.0
  churned["speed"]["dynamic"][1]["evicted_per_update"] = 14.0
  assert ("each column's table evicts 13 ids an update on average over the "
          "run (and admits as many once full), of the 32 it looks up. "
          "Step time") in render.page(churned)


def test_failures_and_a_missing_tfra_are_said():
  broken = copy.deepcopy(RESULT)
  broken["quality"]["hashed"] = [None]
  broken["memory"][0] = None
  text = render.page(broken)
  assert "A quality run failed: no verdict." in text
  assert "A memory run failed: no figure." in text
  assert "Skipped: tensorflow-recommenders-addons is not installed" in text
  assert "Not measured yet: `make bench-dynamic`." in render.page(None)


def test_bad_flags_name_the_flag():
  with pytest.raises(SystemExit):
    bench.parse_args(["--memory_capacities=5"])
  with pytest.raises(SystemExit):
    bench.parse_args(["--rows=0"])
  assert bench.parse_args(["--smoke"]).memory_capacities == [8192, 32768]


def test_the_row_cut_is_judged_at_its_own_capacity():
  cut = copy.deepcopy(RESULT)
  cut["cut"] = {
      "rows": 100, "train": 1000, "distinct": 900, "seen_twice": 30,
      "machine": {"date": "2026-11-29 06:00 UTC",
                  "load_average_at_start": [1.0, 2.0, 3.0],
                  "load_average_at_end": [4.0, 5.0, 6.0]},
      "runs": {"dynamic": [{"auc": 0.71, "examples": 1000, "seconds": 2.0,
                            "rows_in_use": 100}],
               "dynamic_min_count_2": [{"auc": 0.7099, "examples": 1000,
                                        "seconds": 2.0, "rows_in_use": 40}]}}
  text = render.page(cut)
  assert "100 rows per column (100 in all)" in text
  assert "| dynamic, `min_count=2` | 0.7099 | 40 | 40.0% | 500 |" in text
  assert "holds 60.0% fewer rows (target >= 50%: met) at an AUC cost of " \
         "+0.0001" in render.cut_fields(cut)["cut_verdict"]
  assert "Not measured yet: `nice -n 10" in render.page(RESULT)


def test_parts_are_checked_by_name():
  assert bench.parse_args(["--parts=cut"]).parts == ["cut"]
  with pytest.raises(SystemExit):
    bench.parse_args(["--parts=cut,speeds"])


def test_the_reshard_cost_is_said_against_its_share():
  moved = copy.deepcopy(RESULT)
  moved["reshard"] = {
      "capacity": 3000, "dimension": 4, "ids": 2700, "ranks": [2, 3],
      "seconds": 1.5, "share_bytes": 2 * MIB, "peak_over_share": [1.5, 2.0],
      "restore_only_peak_over_share": [0.5, 0.25],
      "machine": {"date": "2026-11-29 06:00 UTC",
                  "load_average_at_start": [1.0, 2.0, 3.0]}}
  text = render.page(moved)
  assert "saved by 2 Horovod ranks and restored into 3" in text
  assert "took 1.50 s on rank 0" in text
  assert "rose by 1.50, 2.00 times its share of the table (2.0 MiB" in text
  assert "Not measured yet: `nice -n 10 .venv/bin/python -m " \
         "tools.bench.dynamic.reshard`" in render.page(RESULT)

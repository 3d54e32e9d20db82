"""The benchmark's arithmetic and report, on fake measurements (no processes).

The numbers in docs/BENCH.md are only as good as the code that pairs,
divides and tabulates them, so that code is checked here in isolation.
"""
import json
import os

import pytest

from estimator_scale import backends
from estimator_scale import environment
from estimator_scale import errors
from estimator_scale import topology
from estimator_scale.backends.horovod import binding
from tests.helpers.processes import PYTHON, run, worker_env
from tools.bench.perf import horovod_knobs
from tools.bench.perf import render
from tools.bench.perf import results
from tools.bench.perf import runner
from tools.bench.perf import variants
from tools.bench.perf import worker


def _fake(rate, rss=500.0, cores=1.0, seconds=10.0):
  return {"examples_per_sec": rate, "peak_rss_mib": rss, "cores_used": cores,
          "seconds": seconds}


def test_median_and_paired_ratios():
  assert results.median([3, 1, 2]) == 2
  assert results.median([4, None, 1, 3, 2]) == 2.5
  assert results.median([None]) is None
  # Pairs are taken within a round; a failed side drops only its round.
  assert results.paired_ratios([10, None, 30], [5, 7, 10]) == [2.0, 3.0]
  assert results.paired_ratios([1, 2], [0, 4]) == [0.5]


def test_row_ratio_is_the_median_of_within_round_ratios():
  spec = ("x", "ours vs peer", "a", "b", variants.EPS, 0.97)
  samples = {"a": [_fake(100), _fake(300), _fake(90)],
             "b": [_fake(100), _fake(200), _fake(100)]}
  row = results.make_row(spec, samples)
  assert row["ratio_samples"] == [1.0, 1.5, 0.9]
  assert row["ratio"] == 1.0  # not 100 / 100 by chance: median of [1, 1.5, .9]
  assert (row["ours_median"], row["peer_median"]) == (100, 100)
  assert row["met"] is True
  row = results.make_row(("x", "", "a", "b", variants.EPS, 1.1), samples)
  assert row["met"] is False


def test_memory_rows_and_failed_rows():
  samples = {"a": [_fake(1, rss=600)], "b": [None]}
  memory = results.make_row(("m", "", "a", "a", variants.MIB, None), samples)
  assert memory["ours_median"] == 600 and memory["ratio"] == 1.0
  assert memory["target"] is None and memory["met"] is None
  failed = results.make_row(("f", "", "a", "b", variants.EPS, 1.0), samples)
  assert failed["ratio"] is None and failed["met"] is None


def test_at_most_rows_are_met_at_or_below_their_target():
  samples = {"k64": [_fake(1, seconds=12.0, rss=600),
                     _fake(1, seconds=30.0, rss=700)],
             "k1": [_fake(1, seconds=10.0, rss=500),
                    _fake(1, seconds=10.0, rss=500)]}
  spec = ("t", "time", "k64", "k1", variants.SECONDS, 1.5, variants.AT_MOST)
  row = results.make_row(spec, samples)
  assert row["ratio_samples"] == [1.2, 3.0] and row["ratio"] == 2.1
  assert row["met"] is False and row["direction"] == "<="
  row = results.make_row(spec[:5] + (2.1, variants.AT_MOST), samples)
  assert row["met"] is True  # at the bound counts as met
  memory = results.make_row(("m", "rss", "k64", "k1", variants.MIB, 1.3,
                           variants.AT_MOST), samples)
  assert memory["ratio"] == pytest.approx(1.3) and memory["met"] is True
  # The same ratio against an AT_LEAST target reads the other way.
  assert results.make_row(spec[:6], samples)["met"] is True
  result = {"machine": {"summary": "box", "date": "now"}, "rounds": 2,
            "rows": [row, results.make_row(spec, samples),
                     results.make_row(("h", "rate", "k64", "k1", variants.EPS,
                                     0.97), samples)]}
  text = render.markdown(result)
  assert "| t | time | 21 s | 10 s | 2.1 | 1.2, 3 | ≤ 2.1 | met |" in text
  assert "| 2.1 | 1.2, 3 | ≤ 1.5 | **MISSED** |" in text
  # A throughput row shows its shortest timed window; a seconds row none.
  assert "| ≥ 0.97 | met | 1, 1 | 10.0 s |" in text
  assert "| ≤ 2.1 | met | 1, 1 | - |" in text
  assert "- **t** missed (ratio 2.1, target ≤ 1.5; per round: 1.2, 3)" in text
  # A bench.json saved before rows had a direction still renders as before.
  del result["rows"][2]["direction"]
  assert "| ≥ 0.97 | met |" in render.markdown(result)


def test_json_schema_and_markdown():
  samples = {name: [_fake(1000 + i, cores=1.5)] for i, name in
             enumerate(variants.VARIANTS)}
  samples["hvd2_ours"] = [_fake(100)]  # scaling far below its target
  result = results.build_result(samples, {"summary": "test box", "date": "now"},
                              1)
  loaded = json.loads(json.dumps(result))
  assert set(loaded) >= {"machine", "rows"}
  keys = {"name", "ours", "peer", "ours_median", "peer_median", "unit",
          "ratio", "target", "met"}
  for row in loaded["rows"]:
    assert keys <= set(row), row
    assert row["ours"] in variants.VARIANTS and row["peer"] in variants.VARIANTS
  assert {r["id"] for r in loaded["rows"]} == {s[0] for s in variants.ROWS}
  text = render.markdown(result)
  for spec in variants.ROWS:
    assert f"| {spec[0]} |" in text
  assert "**MISSED**" in text and "## Closing note" in text
  assert "- **4a** missed" in text
  assert "test box" in text and "make bench" in text


def test_rounds_alternate_and_stop_at_the_budget():
  calls, now = [], [0.0]

  def fake_measure(variant):
    calls.append(variant)
    now[0] += 10.0
    return _fake(1)

  groups = [["a", "b"], ["c"]]
  samples = runner.run_rounds(5, 65.0, fake_measure, groups,
                              clock=lambda: now[0])
  # Each round is 30 s; a third would end at 90 s > 65 s, so two run.
  assert calls == ["a", "b", "c", "a", "b", "c"]
  assert [len(samples[v]) for v in "abc"] == [2, 2, 2]


def test_commands_and_combined_rate():
  argv = runner.command(variants.VARIANTS["hvd2_ours"], "/tmp/out",
                        "/tmp/model", scale=0.5)
  assert argv[0].endswith("horovodrun") and argv[argv.index("-np") + 1] == "2"
  steps = variants.VARIANTS["hvd2_ours"][2]["steps"]
  assert f"--steps={int(steps * 0.5)}" in argv
  assert "--threads=1" in argv and "--distribution=horovod" in argv
  argv = runner.command(variants.VARIANTS["mwms2_ours"], "/tmp/out", "/tmp/m")
  assert argv[1:3] == ["-m", "estimator_scale.launcher"]
  assert "--workers=2" in argv
  argv = runner.command(variants.VARIANTS["digits_hand"], "/tmp/out", "/tmp/m")
  assert argv[1:3] == ["-m", worker.MODULE] and "--kind=hand" in argv
  combined = runner.combine([
      {"examples": 100, "seconds": 1.0, "peak_rss_mib": 5, "cores_used": 1.0},
      {"examples": 100, "seconds": 2.0, "peak_rss_mib": 7, "cores_used": 0.5}])
  assert combined["examples_per_sec"] == 100.0
  assert combined["peak_rss_mib"] == 7 and combined["cores_used"] == 0.75
  assert combined["seconds"] == 2.0


def test_startup_variants_differ_only_in_batch_and_k():

  def child(variant):
    argv = runner.command(variants.VARIANTS[variant], "/tmp/out", "/tmp/m",
                          scale=0.25)
    assert argv[1:3] == ["-m", worker.MODULE] and "--kind=startup" in argv
    return set(worker.startup_child_argv(worker.parse_args(argv[3:])))

  k64, k1 = child("startup_k64"), child("startup_k1")
  assert k64 - k1 == {"--batch=512", "--accumulation_steps=64"}
  assert k1 - k64 == {"--batch=8", "--accumulation_steps=1"}
  # The updates the rows name are not scaled down with the timed steps.
  assert {"--kind=startup_child", "--model=resnet20", "--steps=4",
          "--model_dir=/tmp/m", "--out=/tmp/out"} <= k1


def test_startup_fields_and_their_way_through_combine():
  milestones = {"ready": 105.0, "run_ends": [107.0, 107.5, 108.0, 108.5]}
  fields = worker.startup_fields(100.0, milestones, batch=512)
  # Ready 5 s after the start; 3 x 512 examples in the 1.5 s after update 1.
  assert fields == {"session_seconds": 5.0, "update_examples_per_sec": 1024}
  result = dict(examples=2048, seconds=10.0, peak_rss_mib=600,
                cores_used=1.0, rank=0, **fields)
  combined = runner.combine([result])
  assert combined["session_seconds"] == 5.0
  assert combined["update_examples_per_sec"] == 1024
  assert "rank" not in combined
  assert "session_seconds" not in runner.combine([_fake(1, seconds=1.0) |
                                                   {"examples": 1}])


def _startup_rows(rate_row=True):
  """Rows 6a-6d from two rounds of fake startup runs."""
  k64 = _fake(1, seconds=16.0, rss=560) | {"session_seconds": 5.0,
                                           "update_examples_per_sec": 256.0}
  k1 = _fake(1, seconds=8.0, rss=530) | {"session_seconds": 5.0,
                                         "update_examples_per_sec": 32.0}
  k2 = k1 | {"session_seconds": 4.0}
  samples = {"startup_k64": [k64, k64], "startup_k1": [k1, k1],
             "startup_k2": [k2, k2]}
  return [results.make_row(spec, samples) for spec in variants.ROWS
          if spec[0].startswith("6") and (rate_row or spec[0] != "6d")]


def test_startup_rows_and_the_compute_floor_of_6a():
  rows = {row["id"]: row for row in _startup_rows()}
  assert rows["6a"]["ratio"] == 2.0 and rows["6a"]["met"] is False
  assert rows["6b"]["met"] is True and rows["6c"]["ratio"] == 1.25
  assert rows["6c"]["met"] is False and rows["6d"]["ratio"] == 8.0
  text = render.markdown({"machine": {"summary": "box", "date": "now"},
                          "rounds": 2, "rows": list(rows.values())})
  assert "| 6c |" in text and "| 5 s | 4 s | 1.25 | 1.25, 1.25 | ≤ 1.1 | **MISSED** |" in text
  # 4 x 512 examples at 256/s take 8 s, 4 x 8 at 32/s 1 s: 8 - 1 + 8 = 15 s.
  assert "about 8.0 s against 1.0 s" in text
  assert "8.0 s - 1.0 s + 8.0 s: a ratio of about 1.88 at best" in text
  # Without row 6d (a bench.json saved before it) the reason is in words.
  text = render.markdown({"machine": {"summary": "box", "date": "now"},
                          "rounds": 2, "rows": _startup_rows(False)})
  assert "- **6a** missed" in text and "no accumulation design" in text
  assert "at best" not in text


def test_every_row_names_measured_variants_and_rows_have_groups():
  grouped = {v for group in variants.GROUPS for v in group}
  assert grouped == set(variants.VARIANTS)
  for spec in variants.ROWS:
    assert spec[2] in grouped and spec[3] in grouped, spec


_PIN_THREADS = """
import os, sys
from tools.bench.perf import worker
worker.pin_threads(0)
assert "tensorflow" not in sys.modules  # the startup wrapper's case
worker.pin_threads(1)
import tensorflow as tf
print(tf.config.threading.get_intra_op_parallelism_threads(),
      os.environ.get("TF_NUM_INTEROP_THREADS"),
      os.environ.get("TF_NUM_INTRAOP_THREADS"))
"""


def test_worker_pins_threads_with_the_frameworks_function():
  # A fresh process: the pool can be sized only before TensorFlow starts.
  env = dict(worker_env())
  env.pop("TF_NUM_INTEROP_THREADS", None)
  env.pop("TF_NUM_INTRAOP_THREADS", None)
  proc = run([PYTHON, "-c", _PIN_THREADS], env=env)
  # The intra-op pool sized by backends.base.pin_threads, the inter-op pool
  # through the environment, and no second intra-op setting beside it.
  assert proc.stdout.split() == ["1", "1", "None"]
  args = worker.parse_args(["--kind", "ours", "--batch", "8", "--out", "x"])
  assert args.warmup >= 1 and args.distribution == "none"


def test_horovod_knobs_ratios_are_taken_within_rounds(tmp_path):
  samples = {horovod_knobs.SINGLE: [100.0, 50.0],
             "2 Horovod ranks, framework defaults": [180.0, 95.0],
             "2 multi_worker_mirrored workers": [None, 90.0]}
  rows = {r["variant"]: r for r in horovod_knobs.summarise(samples)}
  assert rows["2 Horovod ranks, framework defaults"]["ratios_per_round"] == [
      1.8, 1.9]
  assert rows["2 Horovod ranks, framework defaults"][
      "ratio_to_1_process"] == pytest.approx(1.85)
  assert rows["2 multi_worker_mirrored workers"]["ratios_per_round"] == [1.8]
  path = tmp_path / "knobs.json"
  path.write_text(json.dumps({"updates": 250, "rounds": 2,
                              "examples_per_replica": 32,
                              "rows": list(rows.values())}))
  text = "\n".join(render.horovod_knobs_lines(str(path)))
  assert "| 2 Horovod ranks, framework defaults | 138 | 1.85 | 1.8, 1.9 |" in (
      text)
  assert "Not measured" in render.horovod_knobs_lines(str(tmp_path / "no"))[0]


def test_horovod_knobs_starts_the_cli_with_the_benchs_launchers():
  argv = horovod_knobs.command(2, "horovodrun", "/tmp/m", "/tmp/s.json", 10)
  prefix = runner.launcher_argv("horovodrun", 2, [])
  assert argv[:len(prefix)] == prefix
  assert argv[argv.index("-np") + 1] == "2"
  assert "--global_batch_size=64" in argv and "--train_steps=10" in argv
  assert argv[-1] == "--distribution=horovod"
  argv = horovod_knobs.command(2, "launch", "/tmp/m", "/tmp/s.json", 10)
  assert argv[1:4] == ["-m", "estimator_scale.launcher", "--workers=2"]
  assert argv[-1] == "--distribution=multi_worker_mirrored"
  assert not any(a.startswith("--timeout") for a in argv)
  argv = horovod_knobs.command(1, "python", "/tmp/m", "/tmp/s.json", 10)
  assert argv[1:3] == ["-m", "estimator_scale.cli"]
  assert "--global_batch_size=32" in argv
  assert not any(a.startswith("--distribution") for a in argv)


def test_horovod_defaults_yield_to_the_users_environment():
  environ = {"HOROVOD_CYCLE_TIME": "0.5"}
  binding.apply_defaults(environ)
  assert environ == {"HOROVOD_CYCLE_TIME": "0.5"}
  environ = {}
  binding.apply_defaults(environ)
  assert environ == binding.HOROVOD_DEFAULTS


def test_horovod_ranks_get_even_disjoint_shares_of_the_cores():
  assert binding.rank_cores({3, 1, 0, 2}, 1, 2) == [2, 3]
  assert binding.rank_cores(range(5), 2, 3) == [2]
  assert binding.rank_cores(range(2), 0, 3) is None  # more ranks than cores
  assert binding.rank_cores(range(8), 0, 1) is None  # one rank: nothing to do


def test_core_binding_is_checked_and_can_be_turned_off():
  ranks = topology.Topology(backend=backends.get("horovod"), num_workers=2,
                            local_size=2)
  with pytest.raises(errors.ConfigError, match="ESTIMATOR_SCALE_CORE_BINDING"):
    binding.bind_to_cores(ranks, {environment.CORE_BINDING: "socket"})
  before = os.sched_getaffinity(0)
  unbound = {environment.CORE_BINDING: "none"}
  assert binding.bind_to_cores(ranks, unbound) is None
  # More threads asked for than a rank's share: left unbound.
  assert binding.bind_to_cores(ranks, {}, threads=len(before) + 1) is None
  assert os.sched_getaffinity(0) == before

"""tools/bench/network/scaling_model.py's formula on known numbers, and the network bench's
arithmetic on fake measurements (no processes, no rig).

docs/NETWORK.md's predictions and its model / measured columns are only as
good as this arithmetic, so each term is pinned here by hand.
"""
import dataclasses
import math
import threading

import pytest

from tools.bench.network import analysis
from tools.bench.network import links
from tools.bench.network import render as network_render
from tools.bench.network import rows as network_rows
from tools.bench.network import scaling_model as sm
from tools.bench.perf import runner
from tools.bench.perf import windows

MB = 1e6
LINK = sm.Link(bandwidth=100 * MB, latency=1e-4)


def test_ring_cost_for_two_and_four_hosts():
  # N=2: each host sends and receives the whole buffer once (2(N-1)/N = 1),
  # in 2 steps.
  assert sm.ring_seconds(10 * MB, 2, LINK) == pytest.approx(0.1 + 2e-4)
  # N=4: 1.5x the buffer, 6 steps.
  assert sm.ring_seconds(10 * MB, 4, LINK) == pytest.approx(0.15 + 6e-4)
  assert sm.ring_seconds(10 * MB, 1, LINK) == 0


def test_horovod_adds_half_a_cycle_and_a_negotiation_ring():
  recipe = sm.Recipe(cycle_s=0.005)
  expected = 0.0025 + 2e-4 + (0.1 + 2e-4)
  assert sm.exchange_seconds(10 * MB, 2, LINK, recipe) == pytest.approx(
      expected)
  collective = sm.Recipe(exchange="collective")
  assert sm.exchange_seconds(10 * MB, 2, LINK, collective) == pytest.approx(
      0.1 + 2e-4)


def test_compression_halves_the_bytes_only():
  plain = sm.Recipe(exchange="collective")
  fp16 = sm.Recipe(exchange="collective", compression=0.5)
  no_latency = sm.Link(100 * MB, 0.0)
  assert sm.exchange_seconds(10 * MB, 4, no_latency, fp16) == pytest.approx(
      sm.exchange_seconds(10 * MB, 4, no_latency, plain) / 2)
  # The latency term does not shrink.
  assert (sm.exchange_seconds(0, 4, LINK, fp16) ==
          sm.exchange_seconds(0, 4, LINK, plain))


def test_cpu_per_gradient_byte_adds_to_the_wire():
  no_latency = sm.Link(100 * MB, 0.0)
  fp16 = sm.Recipe(exchange="collective", compression=0.5,
                   cpu_s_per_byte=2e-9)
  # Half of 10 MB on the wire (0.05 s) plus 10 MB of casts at 2 ns a byte.
  assert sm.exchange_seconds(10 * MB, 2, no_latency, fp16) == pytest.approx(
      0.05 + 0.02)
  plain = sm.Recipe(exchange="collective")
  assert sm.exchange_seconds(10 * MB, 2, no_latency, plain) == pytest.approx(
      0.1)
  # On a link faster than the casts, compression loses.
  fast = sm.Link(1000 * MB, 0.0)
  assert (sm.exchange_seconds(10 * MB, 2, fast, fp16) >
          sm.exchange_seconds(10 * MB, 2, fast, plain))


def test_the_sum_in_the_ring_hides_under_a_slower_wire():
  # fp16 of 10 MB on 2 hosts: 5 MB sent, in Gloo's 1 MiB segments (5, so
  # 3 per host: a host sums 3 in turn); a host sums half of the 10 MB of
  # gradients at 2 ns a byte (0.01 s) and casts all 10 MB at 1 ns (0.01 s).
  fp16 = sm.Recipe(exchange="collective", compression=0.5,
                   cpu_s_per_byte=1e-9, reduce_s_per_byte=2e-9)
  assert sm.pipeline_depth(5 * MB, 2) == 3
  # A 100 MB/s wire (0.05 s) hides all of the sum but its last segment's;
  # the casts are paid on top.
  slow = sm.Link(100 * MB, 0.0, cpu_bandwidth=500 * MB)
  assert sm.exchange_seconds(10 * MB, 2, slow, fp16) == pytest.approx(
      0.05 + 0.01 / 3 + 0.01)
  # On a link the CPU bounds (the rig's unshaped veth, whose wire is the
  # cores' copies) the reduce-scatter half is the copies (0.005 s) and the
  # sum, plus the first segment's arrival; the allgather half is 0.005 s.
  cpu_bound = sm.Link(500 * MB, 0.0, cpu_bandwidth=500 * MB)
  assert sm.exchange_seconds(10 * MB, 2, cpu_bound, fp16) == pytest.approx(
      0.005 + (0.005 + 0.01) + 0.005 / 3 + 0.01)
  # On 4 hosts a host sends 1.5 x 5 MB (0.015 s, half of it per phase) and
  # sums 3/4 of the gradients (0.015 s) in 3 steps of 2 segments.
  assert sm.pipeline_depth(5 * MB, 4) == 6
  assert sm.data_seconds(10 * MB, 4, cpu_bound, fp16) == pytest.approx(
      0.0075 + (0.0075 + 0.015) + 0.0075 / 6 + 0.01)
  # Half a core each (4 rig hosts on 2 cores) doubles a rank's own work,
  # the sums and the casts, not the copies.
  shared = sm.Link(500 * MB, 0.0, cpu_bandwidth=500 * MB, cpu_share=0.5)
  assert sm.data_seconds(10 * MB, 4, shared, fp16) == pytest.approx(
      0.0075 + (0.0075 + 0.03) + 0.0075 / 6 + 0.02)
  assert links.cpu_share(4, 2) == 0.5 and links.cpu_share(2, 2) == 1
  # A wire faster than the cores copy runs at their pace, both halves.
  assert sm.data_seconds(10 * MB, 2, sm.Link(5000 * MB, 0.0,
                                             cpu_bandwidth=500 * MB),
                         sm.Recipe()) == pytest.approx(0.02)
  # Without a CPU bandwidth the cores copy for free: the wire or the sum.
  assert sm.data_seconds(10 * MB, 2, sm.Link(1000 * MB, 0.0), fp16) == (
      pytest.approx(0.0025 + 0.01 + 0.0025 / 3 + 0.01))
  with pytest.raises(ValueError, match="cpu_bandwidth=0: must be > 0"):
    sm.Link(1.0, 0.0, cpu_bandwidth=0)
  with pytest.raises(ValueError, match=r"cpu_share=2: must be in \(0, 1\]"):
    sm.Link(1.0, 0.0, cpu_share=2)


def test_a_rank_slower_than_one_process_costs_efficiency():
  # Compute 0.1 s alone, 0.12 s in the job, 0.03 s of exchange.
  recipe = sm.Recipe(exchange="collective")
  exchange = sm.exchange_seconds(1 * MB, 2, LINK, recipe)
  assert sm.efficiency(0.12, 1 * MB, 2, LINK, recipe, alone_s=0.1) == (
      pytest.approx(0.1 / (0.12 + exchange)))
  assert sm.efficiency(0.1, 1 * MB, 2, LINK, recipe) == pytest.approx(
      0.1 / (0.1 + exchange))


def test_accumulation_pays_the_apply_once_per_update():
  # 0.1 s per micro-batch and 0.02 s of apply: alone at k=1 an update of
  # one micro-batch takes 0.12 s; at k=4 on one host, 0.42 s for four.
  one_host = sm.efficiency(0.1, 1 * MB, 1, LINK,
                           sm.Recipe(accumulation_steps=4), apply_s=0.02)
  assert one_host == pytest.approx(4 * 0.12 / 0.42)
  assert sm.split_apply(0.12, 0.1 + 0.02 / 4, 4) == pytest.approx((0.1, 0.02))
  # Noise that makes k = n look slower is no apply, not a negative one.
  assert sm.split_apply(0.12, 0.13, 4) == (0.12, 0.0)
  with pytest.raises(ValueError, match="n=1"):
    sm.split_apply(0.12, 0.1, 1)


def test_accumulation_divides_exchanges_per_example_by_k():
  compute, nbytes = 0.05, 10 * MB
  k1 = sm.Recipe()
  k4 = sm.Recipe(accumulation_steps=4)
  exchange = sm.exchange_seconds(nbytes, 4, LINK, k1)
  assert sm.update_seconds(compute, nbytes, 4, LINK, k4) == pytest.approx(
      4 * compute + exchange)
  # Per micro-batch, a quarter of the exchange.
  per_micro = sm.update_seconds(compute, nbytes, 4, LINK, k4) / 4
  assert per_micro - compute == pytest.approx(exchange / 4)
  assert sm.efficiency(compute, nbytes, 4, LINK, k4) == pytest.approx(
      compute / (compute + exchange / 4))
  assert sm.efficiency(compute, nbytes, 1, LINK, k1) == 1.0


def test_a_token_buckets_burst_passes_free():
  burst = sm.Link(100 * MB, 0.0, burst=2 * MB)
  # N=2 sends the whole 10 MB; the first 2 MB go at once.
  assert sm.ring_seconds(10 * MB, 2, burst) == pytest.approx(0.08)
  assert sm.ring_seconds(1 * MB, 2, burst) == 0


def test_goodput_and_the_small_allreduce_fit():
  # tbf's 100mbit left 12 MB/s to one TCP stream alone (../shared/NOTES.md);
  # a ring's streams also carry the ACKs of the data coming the other way.
  assert sm.goodput(100e6) == pytest.approx(11.70e6, rel=1e-3)
  recipe = sm.Recipe(cycle_s=0.004, overhead_s=0.002)
  seconds = {n: sm.exchange_seconds(4, n, LINK, recipe) for n in (2, 3, 4)}
  latency, overhead = sm.fit_small_allreduces(seconds, recipe)
  assert latency == pytest.approx(1e-4, rel=1e-2)
  assert overhead == pytest.approx(0.002, rel=1e-2)
  with pytest.raises(ValueError, match="two or more host counts"):
    sm.fit_small_allreduces({2: 0.01}, recipe)


@pytest.mark.parametrize("kwargs, message", [
    (dict(exchange="nccl"), "exchange='nccl': expected one of horovod"),
    (dict(compression=0), "compression=0: must be in (0, 1]"),
    (dict(accumulation_steps=0), "accumulation_steps=0: must be >= 1"),
    (dict(cpu_s_per_byte=-1), "cpu_s_per_byte=-1: must be >= 0"),
    (dict(reduce_s_per_byte=-1), "reduce_s_per_byte=-1: must be >= 0"),
])
def test_bad_recipe_names_the_argument(kwargs, message):
  with pytest.raises(ValueError, match=message.replace("(", r"\(")
                     .replace("]", r"\]")):
    sm.Recipe(**kwargs)


def test_bad_arguments_name_the_argument():
  with pytest.raises(ValueError, match="hosts=0"):
    sm.ring_seconds(1, 0, LINK)
  with pytest.raises(ValueError, match="bandwidth=0"):
    sm.Link(0, 0)
  with pytest.raises(ValueError, match="--rates='10mbit': expected some of "
                     "unshaped, 1gbit, 100mbit"):
    links.rate_names("10mbit")
  with pytest.raises(ValueError, match="--models='vgg'"):
    links.names_in("vgg", network_rows.MODELS, "--models")


def test_cycle_default_is_the_frameworks():
  from estimator_scale.backends.horovod import binding  # TensorFlow: late
  assert float(binding.HOROVOD_DEFAULTS["HOROVOD_CYCLE_TIME"]) / 1e3 == (
      sm.DEFAULT_CYCLE_S)


def test_cli_prints_a_table_and_refuses_bad_numbers(capsys):
  sm.main(["--compute_ms=10", "--megabytes=1", "--hosts=8", "--gbits=10"])
  out = capsys.readouterr().out
  assert "| 10 Gbit/s | 8 |" in out and "Horovod k=4" in out
  assert "8 hosts: fp16 compression pays at any bandwidth" in out
  sm.main(["--compute_ms=10", "--megabytes=1", "--hosts=2",
           "--fp16_cast_ns_per_byte=1"])
  assert "2 hosts: fp16 compression pays below 4 Gbit/s per host" in (
      capsys.readouterr().out)
  with pytest.raises(SystemExit):
    sm.main(["--compute_ms=10", "--megabytes=1", "--hosts=x"])
  assert "--hosts='x': expected comma-separated numbers" in (
      capsys.readouterr().err)


def test_rig_placement_of_horovodrun_and_launch():
  argv = runner.launcher_argv("horovodrun", 2, ["w"], hosts=["h1", "h2"])
  assert argv[-3:] == ["-H", "h1:1,h2:1", "w"]
  argv = runner.launcher_argv("launch", 2, ["w"], hosts=["h1", "h2"])
  assert "--hosts=h1,h2" in argv and "--workers=2" not in argv
  with pytest.raises(ValueError, match="one host per process"):
    runner.launcher_argv("horovodrun", 2, ["w"], hosts=["h1"])


def _allreduce_result():
  """Fake runs made by the model itself, with known inputs, as JSON has them."""
  latency, unshaped = 2e-4, 300 * MB
  recipe = sm.Recipe(overhead_s=0.003)
  fp16 = sm.Recipe(overhead_s=0.003, compression=0.5, cpu_s_per_byte=1e-9,
                   reduce_s_per_byte=4e-9)
  collective = sm.Recipe(exchange="collective", overhead_s=0.002,
                         cpu_s_per_byte=1e-9)
  buffers = {"small": 1_000_000, "large": 20_000_000}
  runs = []
  for rate in ("unshaped", "100mbit"):
    for hosts in (2, 3):
      link = links.link(rate, latency, unshaped, links.cpu_share(hosts, 2))
      seconds = {str(int(b)): sm.exchange_seconds(b, hosts, link, recipe)
                 for b in (4, *buffers.values())}
      fp16_seconds = {str(b): sm.exchange_seconds(b, hosts, link, fp16)
                      for b in buffers.values()}
      runs.append({"exchange": "horovod", "rate": rate, "hosts": hosts,
                   "cycle_s": recipe.cycle_s,
                   "gap_s": 0.02, "seconds": seconds,
                   "fp16_seconds": fp16_seconds,
                   "cast_seconds": {str(b): 1e-9 * b
                                    for b in buffers.values()},
                   "samples": {}})
      if hosts == 2:
        runs.append({"exchange": "collective", "rate": rate, "hosts": hosts,
                     "gap_s": 0.02, "samples": {}, "seconds": {
                         str(b): sm.exchange_seconds(b, hosts, link,
                                                     collective)
                         for b in (4, *buffers.values())}})
  return {"buffers": buffers, "probe_bytes": 4, "runs": runs,
          "machine": {"cores": 2}}


def test_allreduce_calibration_recovers_its_inputs_and_predicts_exactly():
  result = _allreduce_result()
  fit = analysis.calibration(result)
  assert fit["latency_s"] == pytest.approx(2e-4, rel=1e-3)
  assert fit["overhead_s"] == pytest.approx(0.003, rel=1e-3)
  assert fit["unshaped_bandwidth"] == pytest.approx(300 * MB, rel=1e-2)
  assert fit["fp16_cast_s_per_byte"] == pytest.approx(1e-9)
  assert fit["fp16_sum_s_per_byte"] == pytest.approx(4e-9, rel=2e-2)
  assert fit["collective_cpu_s_per_byte"] == pytest.approx(1e-9, rel=2e-2)
  assert fit["collective_overhead_s"] == pytest.approx(0.002, rel=1e-3)
  # Each variant of the rows gets its own exchange's cost per byte.
  cpu = {v: network_rows.recipe(v, fit).cpu_s_per_byte
         for v in network_rows.VARIANTS}
  assert cpu["horovod"] == cpu["horovod_k4"] == 0
  assert cpu["horovod_fp16"] == fit["fp16_cast_s_per_byte"]
  assert cpu["multi_worker_mirrored"] == fit["collective_cpu_s_per_byte"]
  assert network_rows.recipe("horovod_fp16", fit).reduce_s_per_byte == (
      fit["fp16_sum_s_per_byte"])
  rows = analysis.comparison(result)
  assert len(rows) == 26
  for rate, hosts, label, _, measured, predicted, _ in rows:
    assert predicted == pytest.approx(measured, rel=1e-2), (rate, hosts, label)
  # The unshaped runs calibrate; every shaped row is a test.
  assert [r[:3] for r in rows if r[6]] == [
      ("100mbit", 2, "4 B probe"), ("100mbit", 2, "small"),
      ("100mbit", 2, "large"), ("100mbit", 2, "small fp16"),
      ("100mbit", 2, "large fp16"), ("100mbit", 2, "4 B probe collective"),
      ("100mbit", 2, "small collective"), ("100mbit", 2, "large collective"),
      ("100mbit", 3, "4 B probe"),
      ("100mbit", 3, "small"), ("100mbit", 3, "large"),
      ("100mbit", 3, "small fp16"), ("100mbit", 3, "large fp16")]


def test_rows_efficiency_is_paired_within_rounds():
  fake = lambda rate: {"examples_per_sec": rate, "seconds": 21.0}
  # The round's baseline is the mean of its runs before, between and
  # after the variants.
  single = [network_rows.bracketed([fake(100), fake(80), fake(120)],
                                   ["horovod", "other"]),
            network_rows.bracketed([fake(80), fake(80), fake(80)],
                                   ["horovod", "other"]),
            network_rows.bracketed([fake(100), None, fake(100)],
                                   ["horovod", "other"])]
  assert single[0] == {"examples_per_sec": 100, "seconds": 21.0,
                       "runs": [100, 80, 120]}
  with pytest.raises(ValueError, match="2 baseline runs for 2 variants"):
    network_rows.bracketed([fake(1), fake(1)], ["horovod", "other"])
  calibration = {"latency_s": 1e-4, "overhead_s": 0.0,
                 "unshaped_bandwidth": 300 * MB}
  unshaped = links.link("unshaped", 1e-4, 300 * MB)
  exchange = sm.exchange_seconds(1 * MB, 2, unshaped, sm.Recipe())
  # One process at k=16: 0.3 s per micro-batch against round 1's 0.32 at
  # k=1, so the apply is 16/15 x 0.02 s and the compute the rest.
  single_k = [{"examples_per_sec": 32 / 0.3, "seconds": 21.0,
               "accumulation_steps": 16}, None, None]
  compute, apply = sm.split_apply(0.32, 0.3, 16)
  assert apply == pytest.approx(0.02 * 16 / 15)
  assert compute + apply == pytest.approx(0.32)
  # A rank of the k=16 job computes 0.4 s per micro-batch: 16 x 32 x 2
  # examples per (16 x 0.4 s + the exchange), 4/3 of the lone 0.3 s.
  in_job = {"examples_per_sec": 16 * 32 * 2 / (16 * 0.4 + exchange),
            "seconds": 30.0, "accumulation_steps": 16, "processes": 2}
  result = {
      "hosts": 2, "machine": {"cores": 2}, "micro_batch": 32,
      "calibration": calibration,
      "gradient_bytes": {"m": 1 * MB},
      "recipes": {"horovod": vars(sm.Recipe())},
      "samples": {"m": {"single": single, "single_k": single_k,
                        "in_job": {"horovod": [in_job, None, None]},
                        "rows": {"100mbit": {"horovod": [
                            fake(180), fake(120), fake(150)]}}}}}
  # The job's slowdown (4/3) scales compute and apply alike.
  assert network_render.in_job_compute_s(result, "m", "horovod") == (
      pytest.approx(0.32 * 4 / 3))
  (row,) = network_render.rows(result)
  # Each round divides by its own baseline (180 / 2 / 100 and 120 / 2 /
  # 80); round 3's baseline failed: only rounds 1 and 2 pair.
  assert row["per_round"] == [0.9, 0.75]
  assert row["efficiency"] == pytest.approx(0.825)
  # Each round's model takes that round's compute: round 1's alone is
  # 32 / 100 s and in the job 4/3 of it; rounds 2 and 3 measured no
  # process at k=16.
  link = links.link("100mbit", 1e-4, 300 * MB)
  assert row["predicted"] == pytest.approx(sm.efficiency(
      compute * 4 / 3, 1 * MB, 2, link, sm.Recipe(), alone_s=0.32,
      apply_s=apply * 4 / 3))
  assert row["predicted_alone"] == pytest.approx(sm.efficiency(
      compute, 1 * MB, 2, link, sm.Recipe(), apply_s=apply))
  assert row["predicted"] < row["predicted_alone"]
  assert row["shortest_window_s"] == 21.0


def test_windows_handshake_releases_a_rank_after_the_reshape(tmp_path):
  assert windows.total_runs(5, [10, 20, 3], 2) == 5 + 33 + 4
  order = []

  def rank():  # a rank's pause file is named by its pid: one per process
    windows.pause(str(tmp_path), 0)
    order.append("rank")

  thread = threading.Thread(target=rank)
  thread.start()
  assert windows.wait_and_release(str(tmp_path), 0, 1,
                                  lambda: order.append("reshape"),
                                  lambda: False)
  thread.join(5)
  assert order == ["reshape", "rank"]
  # A bench told to stop gives up instead of waiting for ranks.
  assert not windows.wait_and_release(str(tmp_path), 1, 1, None, lambda: True)


def test_fp16_pays_below_the_bandwidth_its_cpu_costs_allow():
  plain = sm.Recipe()
  casts_only = sm.Recipe(compression=0.5, cpu_s_per_byte=1e-9)
  # Casts of 1 ns a byte against (N-1)/N of a byte saved on the wire:
  # even at (N-1)/(N x 1 ns), 500 MB/s on 2 hosts, 750 MB/s on 4.
  assert sm.break_even_bandwidth(10 * MB, 2, plain, casts_only) == (
      pytest.approx(500 * MB, rel=1e-6))
  assert sm.break_even_bandwidth(10 * MB, 4, plain, casts_only) == (
      pytest.approx(750 * MB, rel=1e-6))
  # A sum the wire cannot hide lowers it. With a CPU that copies at
  # 1 GB/s and sums at 4 ns, fp16 of 10 MB on 2 hosts takes 2.5 MB / B on
  # the allgather's wire, 2.5 ms of copies and 20 ms of sum in the
  # reduce-scatter (above its wire at these rates), one of its 3 segments'
  # arrival (2.5 MB / 3B) and 10 ms of casts: 10 MB / B (plain) where
  # (10 - 10/3) MB / B = 32.5 ms.
  fp16 = dataclasses.replace(casts_only, reduce_s_per_byte=4e-9)
  assert sm.break_even_bandwidth(10 * MB, 2, plain, fp16,
                                 cpu_bandwidth=1e9) == (
      pytest.approx((10 - 10 / 3) * MB / 0.0325, rel=1e-6))
  assert sm.break_even_bandwidth(10 * MB, 2, plain,
                                 sm.Recipe(compression=0.5)) == math.inf
  # A recipe that never saves time has no break-even.
  assert sm.break_even_bandwidth(10 * MB, 2, plain,
                                 sm.Recipe(cpu_s_per_byte=1e-9)) is None

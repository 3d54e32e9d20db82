"""The table-costs bench's arithmetic: lines, growth verdicts, the plan and
the page, from a small made-up results file (no job runs)."""
import pytest

from tools.bench.table_costs import figures
from tools.bench.table_costs import fit
from tools.bench.table_costs import jobs
from tools.bench.table_costs import plan
from tools.bench.table_costs import render

BASE = 500 << 20
PER_ROW_HELD = 256  # 2x the 128 bytes of a row of 16 and its Adagrad slot
SAVE_PER_ROW = 1e-7
RESTORE_PER_ROW = 2e-7
EXPORT_PER_ROW = 5e-8


def _rank(rank, rows, ranks, kind, export):
  """A rank's figures that lie exactly on known lines."""
  held = rows / ranks
  figures_ = {
      "rank": rank, "graph_seconds": 1.0,
      "session_seconds": (RESTORE_PER_ROW * rows if kind != "fresh"
                          else 0.01),
      "step_seconds": 0.02 + 1e-12 * rows, "save_seconds":
          0.1 + SAVE_PER_ROW * rows, "peak_train": BASE + PER_ROW_HELD * held}
  if rank == 0:
    figures_["checkpoint_bytes"] = 128 * rows
  if export:
    figures_.update(eval_seconds=0.5, peak_eval=BASE, peak_export=BASE,
                    export_seconds=0.05 + EXPORT_PER_ROW * rows)
    if rank == 0:
      figures_["export_bytes"] = 64 * rows
  return figures_


def _results(sizes=(1 << 18, 1 << 20, 1 << 22), failed=None):
  runs = {}
  for rows in sizes:
    chain = jobs.chain(rows, 16, [1, 2, 4], 6 << 30, 14 << 30)
    runs[str(rows)] = []
    for ranks, from_ranks, export in chain:
      kind = ("fresh" if from_ranks is None else
              "restore" if from_ranks == ranks else "reshard")
      job = {"wall_seconds": 10.0, "ranks": [
          _rank(r, rows, ranks, kind, export) for r in range(ranks)]}
      if failed == (rows, ranks, kind):
        job = None
      runs[str(rows)].append({"rows": rows, "ranks": ranks, "kind": kind,
                              "from_ranks": from_ranks, "job": job})
      if job is None:
        break  # as jobs.run_size: the next job has no save to restore
  return {"machine": {"date": "2026-12-04 23:00 UTC", "summary": "2 cores",
                      "load_average_at_start": [1.0, 1.0, 1.0],
                      "load_average_at_end": [2.0, 2.0, 2.0]},
          "settings": {"dimension": 16, "batch": 4096, "steps": 25, "rounds": 1,
                       "warmup": 5, "eval_batches": 4, "ranks": [1, 2, 4],
                       "process_limit_gib": 6.0, "job_limit_gib": 14.0,
                       "peak_factor_assumed": 2.5},
          "sizes": runs}


def test_line_is_exact_on_points_of_a_line():
  intercept, slope = fit.line([1, 2, 4], [3, 5, 9])
  assert (intercept, slope) == pytest.approx((1.0, 2.0))
  assert fit.line([8], [4.0]) == (4.0, 0.0)
  assert fit.line([1, 2], [None, None]) is None


def test_growth_calls_a_cost_flat_when_its_slope_is_a_small_part():
  assert fit.growth([1, 100], [1.0, 1.1])["verdict"] == "flat"
  assert fit.growth([1, 100], [1.0, 0.9])["verdict"] == "flat"
  linear = fit.growth([1, 100], [0.01, 1.0])
  assert linear["verdict"] == "linear"
  assert linear["slope"] == pytest.approx(0.01)


def test_growth_names_a_cost_that_grows_faster_than_its_line():
  faster = fit.growth([1, 2, 4, 8], [1.0, 2.0, 4.0, 16.0])
  assert faster["verdict"] == "faster"
  assert faster["power"] == pytest.approx(2.0)
  assert fit.growth([1, 2, 4, 8], [1.0, 2.0, 4.0, 8.0])["verdict"] == (
      "linear")
  assert fit.last_power([4], [1.0]) is None


def test_chain_leaves_out_rank_counts_over_the_memory_limits():
  assert jobs.chain(1 << 18, 16, [1, 2, 4], 6 << 30, 14 << 30) == [
      (1, None, True), (1, 1, False), (2, 1, True), (2, 2, False),
      (4, 2, True), (4, 4, False)]
  # 2^25 x 16 with its slot is 4 GiB: one rank would pass 6 GiB.
  assert jobs.chain(1 << 25, 16, [1, 2, 4], 6 << 30, 14 << 30)[0] == (
      2, None, True)


def test_figures_take_the_median_and_the_restore_from_restore_jobs():
  cells = figures.table(_results())
  cell = cells[(1 << 20, 2)]
  assert cell["step"]["rounds"] == 2
  assert cell["restore"] == {"value": pytest.approx(
      1.0 + RESTORE_PER_ROW * (1 << 20)), "rounds": 1}
  assert cell["reshard_from"] == 1
  assert "reshard" not in cells[(1 << 20, 1)]
  xs, ys = figures.series(cells, "save", 4)
  assert xs == [1 << 18, 1 << 20, 1 << 22]
  growth = fit.growth(xs, ys)
  assert growth["slope"] == pytest.approx(SAVE_PER_ROW)
  assert growth["verdict"] == "linear"
  assert fit.growth(*figures.series(cells, "step", 1))["verdict"] == "flat"


def test_plan_multiplies_the_slopes_out_to_a_billion_ids():
  result = plan.plan(figures.table(_results()), 16)
  a = result["assumptions"]
  assert a["headroom"] == pytest.approx(2.0)
  assert a["scale"] == 4
  assert a["table_bytes"] == 512 * 10**9
  assert a["save_bandwidth"] == pytest.approx(128 / SAVE_PER_ROW)
  ten = result["rows"][0]
  assert ten["hosts"] == 10
  assert ten["memory_per_host"] == pytest.approx(
      BASE + PER_ROW_HELD * 4 * 10**8)
  assert ten["save_seconds"] == pytest.approx(0.1 + SAVE_PER_ROW * 4 * 10**8)
  assert ten["export_seconds"] == pytest.approx(
      0.05 + EXPORT_PER_ROW * 4 * 10**9)
  assert ten["export_bytes"] == pytest.approx(256 * 10**9)
  # 1,024 GB of peak over hosts of 64 GiB, less the 500 MiB base each.
  assert result["hosts_for"][64] == 16
  assert plan.plan(figures.table(_results(sizes=(1 << 18,))), 16) is None


def test_page_states_growth_plan_and_what_is_not_measured():
  text = render.page(_results())
  assert "$" not in text.replace("$name", "")
  assert "| full save | 4 | 3 |" in text
  assert "linear in the table" in text
  assert "flat in the table" in text
  # Without the delta saves' JSON, the delta columns say "-".
  assert "Delta saves: not measured yet" in text
  assert "not measured on ranks, so not planned" in text
  for hosts in (10, 50, 100):
    assert f"\n| {hosts} | " in text
  assert "**2.00x**" in text
  # The made-up exports cost the same per row on 1 rank as on 4.
  assert "an export on 1 rank costs" in text and "(1.0x)" in text


DELTA_PER_ROW = {0.01: 1e-8, 0.1: 1e-7}


def _deltas(sizes=(1 << 18, 1 << 20), ranks=(1, 4)):
  """delta_saves.json's shape, each delta save on a known line: on N
  ranks, N times cheaper per row of the table."""
  return {"dimension": 16, "steps_per_save": 10, "full_every": 2,
          "runs": [{"rows": rows, "touched": touched, "ranks": n,
                    "delta_s": 0.004 + DELTA_PER_ROW[touched] * rows / n,
                    "full_s": 1e-6 * rows,
                    "saves": {"full": [[2, 1.0, 1]] * 3,
                              "delta": [[1, 0.1, 1]] * 4}}
                   for rows in sizes for touched in DELTA_PER_ROW
                   for n in ranks]}


def test_delta_saves_fill_their_lines_and_the_plan():
  text = render.page(_results(), _deltas())
  lines = {l[:len("| 2^20 | 128 | 1 |")]: l for l in text.splitlines()}
  for ranks in (1, 4):
    assert (f"| {0.004 + 1e-8 * (1 << 20) / ranks:.3f} | "
            f"{0.004 + 1e-7 * (1 << 20) / ranks:.3f} |") in lines[
                f"| 2^20 | 128 | {ranks} |"]
  # 2^22 is on the costs bench's lines only, and 2 ranks were not run.
  assert "| - | - |" in lines["| 2^22 | 512 | 1 |"]
  assert "| - | - |" in lines["| 2^20 | 128 | 2 |"]
  assert "The delta save columns are the same sharded table's" in text
  rows = [l for l in text.splitlines()
          if l.startswith("| delta save, 10 % of rows touched")]
  assert len(rows) == 2
  assert "| 1 | 2 |" in rows[0] and "linear in the rows touched" in rows[0]
  # The plan: a host's share at the 4 ranks' rate per row held.
  measured = render.delta_growths(_deltas(), per_rank=True)
  growths = {t: g for (t, n), (_, _, g) in measured.items() if n == 4}
  ten = plan.plan(figures.table(_results()), 16, deltas=growths)["rows"][0]
  assert ten["delta_seconds"][0.1] == pytest.approx(
      0.004 + 1e-7 * 4 * 10**8)
  assert "| 1 %: " in text


def test_page_says_a_failed_job_and_the_sizes_left_out():
  text = render.page(_results(
      sizes=(1 << 18, 1 << 25), failed=(1 << 18, 4, "reshard")))
  assert "| 2^18 | - | 4 | failed (reshard job) |" in text
  assert "Failed jobs" in text and "2^18 rows on 4 ranks (reshard)" in text
  assert "2^25 rows on 1 rank." in text


def test_page_before_any_run_says_how_to_measure():
  assert "Not measured yet: `make bench-table-costs`." in render.page(None)


def _ps_results():
  """Parameter-server chains: the chief's figures alone, and each ps
  task's peak sampled from outside, its share of the table on a line."""
  results = _results()
  for runs in results["sizes"].values():
    for run in runs:
      tasks = run["ranks"]
      run["job"]["ranks"] = run["job"]["ranks"][:1]
      run["job"]["ps_peaks"] = {
          f"ps:{i}": BASE + PER_ROW_HELD * run["rows"] // tasks
          for i in range(tasks)}
  results["settings"]["distribution"] = "parameter_server"
  return results


def test_parameter_server_chains_get_their_own_table_and_lines():
  text = render.page(_results(), None, _ps_results())
  part = text[text.index("## On parameter servers"):]
  assert "Not measured yet" not in part
  lines = {l[:len("| 2^22 | 512 | 4 |")]: l for l in part.splitlines()}
  # 2^22 rows of 128 bytes over 4 ps tasks: 128 MiB each above the base.
  assert lines["| 2^22 | 512 | 4 |"].split(" | ")[10] == f"{500 + 256:,}"
  reshard = 1.0 + RESTORE_PER_ROW * (1 << 22)  # from 2 ps tasks onto 4
  assert f"| {reshard:.2f} ({2}) |" in lines["| 2^22 | 512 | 4 |"]
  growth = [l for l in part.splitlines()
            if l.startswith("| peak memory of a ps task | 4 |")]
  assert len(growth) == 1 and "64.0 MiB" in growth[0], growth
  assert "| cost | ps tasks |" in part
  assert "Every job of every chain finished." in part
  assert "Not measured yet: `make bench-table-costs-ps`" in render.page(
      _results())

"""Days of logs from the command line: killed in day 2, resumed, the third
day landing late.

Four tiny days are written (the fourth only judges the third); the job
trains 2026-01-01:2026-01-03 with --follow. It is killed (SIGKILL) inside
day 2, and the same command resumes while day 3 still lacks its
_SUCCESS, which the test writes once the job says it waits. Each example of
the three days must have been trained once (the updates the kill lost, after
the checkpoint the resume started from, once more), each day judged on the
next by AUC, exported, and the best named.
"""
import datetime
import json
import os
import time

from tests.helpers import day_jobs
from tests.helpers import day_logs
from tests.helpers import waiting

_FIRST = datetime.date(2026, 1, 1)
_SIZES = (43, 150, 37, 30)  # day 2: 19 updates of 8, the last short
_BATCH = 8


def _start(tmp_path, run, pause):
  return day_jobs.start(tmp_path, run, pause, [
      "--model_module=tests.workers.day_clicks", "--model=day_clicks",
      f"--train_data={tmp_path / 'days'}", "--days=2026-01-01:2026-01-03",
      "--follow", "--follow_timeout_secs=120",
      f"--model_dir={tmp_path / 'model'}", f"--global_batch_size={_BATCH}",
      "--optimizer=sgd", "--learning_rate=0.5", "--save_checkpoints_steps=4",
      "--log_every_n_steps=5", f"--summary_json={tmp_path / 'summary.json'}"])


def test_days_killed_in_day_two_resume_and_follow_the_late_third(tmp_path):
  root = tmp_path / "days"
  written = day_logs.write_days(str(root), _FIRST, _SIZES)
  os.remove(root / "day=2026-01-03" / "_SUCCESS")  # not landed yet
  day_two = range(7, 7 + 19)  # day 1: steps 1 to 6 (43 = 5 x 8 + 3)

  first, log = _start(tmp_path, "a", pause=0.1)
  killed_at = day_jobs.kill_after(tmp_path, first, log, day_two[8], 240)
  assert killed_at < day_two[-1], "day 2 ended before the kill"

  second, log = _start(tmp_path, "b", pause=0)
  waiting.wait_for(lambda: day_jobs.said(tmp_path, "b", "waiting up to"),
                   "wait for day 3", time.monotonic() + 240, proc=second,
                   poll=0.05)
  day_logs.mark_landed(str(root), "2026-01-03")
  assert second.wait(timeout=240) == 0, (tmp_path / "log-b.txt").read_text()
  log.close()

  # Each example of days 1 to 3 once, but what the kill lost (trained after
  # the checkpoint the second run resumed from) once more.
  counts, resumed = day_jobs.trained_counts(tmp_path)
  wanted = [i for day in ("2026-01-01", "2026-01-02", "2026-01-03")
            for i in written[day]]
  assert sorted(counts) == sorted(wanted)
  assert set(counts.values()) == {1}
  assert 6 < resumed < killed_at + 1

  summary = json.loads((tmp_path / "model" / "days.json").read_text())
  days = summary["days"]
  assert sorted(days) == ["2026-01-01", "2026-01-02", "2026-01-03"]
  for number, (day, entry) in enumerate(sorted(days.items())):
    assert entry["examples"] == _SIZES[number] and entry["left_out"] == 0
    assert entry["eval_day"] == str(_FIRST + datetime.timedelta(number + 1))
    assert 0.5 < entry["eval"]["auc"] <= 1.0
    assert os.path.exists(os.path.join(entry["export"], "saved_model.pb"))
    assert entry["export"].startswith(str(tmp_path / "model" / "export" / day))
  best = json.loads((tmp_path / "model" / "export" / "best.json").read_text())
  assert best["value"] == max(e["eval"]["auc"] for e in days.values())
  assert best == summary["best"]
  table = (tmp_path / "model" / "days.md").read_text()
  rows = [line.split(" | ")[0] for line in table.splitlines()
          if line.startswith("| 2026")]
  assert rows == ["| 2026-01-01", "| 2026-01-02", "| 2026-01-03"]
  assert (tmp_path / "model" / "auc_by_day.png").stat().st_size > 0
  written_summary = json.loads((tmp_path / "summary.json").read_text())
  assert written_summary["best"] == best
  assert 0 <= written_summary["input_wait"]["share"][0] <= 1

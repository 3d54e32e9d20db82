"""A `--days` job on the command line that a test kills and resumes, and
what it trained.

The job's model records its ids (`trained_ids.day_hooks`): each run appends
to tmp_path/ids-<run>-0.jsonl and logs to tmp_path/log-<run>.txt.
"""
import collections
import subprocess
import time

from tests.helpers import trained_ids
from tests.helpers import waiting
from tests.helpers.processes import CLI, ROOT, worker_env


def start(tmp_path, run, pause, flags):
  """Starts `run` of the job with CLI `flags`, pausing `pause` s after
  each update so that a kill lands inside a day; (process, its log)."""
  env = dict(worker_env(), DAY_IDS_FILE=str(tmp_path / f"ids-{run}-0.jsonl"),
             DAY_SECONDS_PER_UPDATE=str(pause))
  log = open(tmp_path / f"log-{run}.txt", "w")  # pylint: disable=consider-using-with
  return subprocess.Popen(CLI + flags, cwd=ROOT, env=env, stdout=log,
                          stderr=subprocess.STDOUT), log


def said(tmp_path, run, text):
  """Whether `run`'s log holds `text` yet."""
  return text in (tmp_path / f"log-{run}.txt").read_text()


def kill_after(tmp_path, proc, log, step, seconds):
  """SIGKILLs run "a" once it trained update `step`; the last step it
  recorded."""
  waiting.wait_for(
      lambda: any(r["step"] >= step for r in trained_ids.read(tmp_path, "a")),
      f"update {step}", time.monotonic() + seconds, proc=proc, poll=0.05)
  proc.kill()
  proc.wait()
  log.close()
  return max(r["step"] for r in trained_ids.read(tmp_path, "a"))


def trained_counts(tmp_path):
  """(Counter of ids, the step run "b" resumed from) over runs "a" (killed)
  and "b": what "a" trained after that checkpoint was lost with the kill,
  so it counts once, when "b" trains it again."""
  resumed = trained_ids.read(tmp_path, "b")[0]["start"]
  kept = [r for r in trained_ids.read(tmp_path, "a") if r["step"] <= resumed]
  counts = collections.Counter(
      i for r in kept + trained_ids.read(tmp_path, "b") for i in r["ids"])
  return counts, resumed

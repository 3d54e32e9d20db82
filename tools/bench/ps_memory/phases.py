"""Where a ps task's memory peaks: its resident memory in each phase of a job.

A job's peak alone does not say what to fix: initialisation, the first
sparse update, later updates, a checkpoint save, evaluation and export each
touch the tables differently. The chief logs the start and end of each
(Estimator's own INFO lines, at `--verbosity=1`), with absl's timestamp; the
samples of the tasks' resident memory are split at those times.
"""
import datetime
import re
import time

# (phase, the chief's line that starts it); a phase ends where the next
# one found in the log starts, the last one at the job's end.
PHASES = (
    ("build", r"Calling model_fn\."),
    ("init", r"Graph was finalized\."),
    ("save 0", r"Saving checkpoints for 0 "),
    ("steps", r"Calling checkpoint listeners after saving checkpoint 0\."),
    ("final save", r"Saving checkpoints for [1-9]\d* "),
    ("evaluate", r"Starting evaluation"),
    ("export", r"Signatures INCLUDED in export"),
    ("exit", r"exported SavedModel to"),
)

_LINE = re.compile(r"^\[chief:0\] I(\d\d)(\d\d) (\d\d:\d\d:\d\d\.\d+) .*?\] (.*)$")


def markers(log_text, year):
  """[(phase, time.time() of its start)] from the chief's lines in the log.

  Each phase is taken at the first line that starts it after the previous
  phase's start (evaluation builds the model again: that is not "build").
  """
  found, index = [], 0
  for line in log_text.splitlines():
    match = _LINE.match(line)
    if not match or index >= len(PHASES):
      continue
    month, day, clock, message = match.groups()
    for position in range(index, len(PHASES)):
      phase, pattern = PHASES[position]
      if re.match(pattern, message):
        when = datetime.datetime.strptime(
            f"{year}-{month}-{day} {clock}", "%Y-%m-%d %H:%M:%S.%f")
        found.append((phase, when.timestamp()))
        index = position + 1
        break
  return found


def peaks_by_phase(timeline, log_text, tasks):
  """{phase: {task: largest resident bytes sampled in it}}.

  Args:
    timeline: [(time.time(), {task: resident bytes})], `procs.watch`'s.
    log_text: the job's output, with the chief's lines.
    tasks: the task names to report (e.g. the ps tasks).
  """
  if not timeline:
    return {}
  phase_starts = markers(log_text, time.localtime(timeline[0][0]).tm_year)
  table = {}
  bounds = [t for _, t in phase_starts[1:]] + [float("inf")]
  for (phase, start), end in zip(phase_starts, bounds):
    row = {}
    for when, resident in timeline:
      if start <= when < end:
        for task in tasks:
          if task in resident:
            row[task] = max(row.get(task, 0), resident[task])
    table[phase] = row
  return table

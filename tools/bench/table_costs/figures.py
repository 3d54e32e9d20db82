"""The costs of each size and rank count, read from the jobs' rank files.

Which rank speaks for a job depends on the cost: the step is one
collective, so rank 0's; a save ends with rank 0's merge, so rank 0's; a
restore, an evaluation and an export end when the slowest rank does, so
the largest over the ranks; memory is per process, so the largest rank's
(and the largest ps task's, sampled from outside the job).
Where several jobs measured a cost (the restore job trains and saves
again), the figure is their median and `rounds` says how many.
"""
import statistics

COSTS = ("step", "save", "restore", "reshard", "eval", "export",
         "peak_train", "peak_eval", "peak_export", "ps_peak",
         "checkpoint_bytes", "export_bytes")


def _rank0(job, key):
  return job["ranks"][0].get(key)


def _largest(job, key):
  values = [r[key] for r in job["ranks"] if r.get(key) is not None]
  return max(values) if values else None


def _start(job):
  """train() to its first update: graph, session and the restore."""
  return max(r["graph_seconds"] + r["session_seconds"] for r in job["ranks"])


READERS = {
    "step": lambda run: _rank0(run["job"], "step_seconds"),
    "save": lambda run: _rank0(run["job"], "save_seconds"),
    "restore": lambda run: _start(run["job"]) if run["kind"] == "restore"
               else None,
    "reshard": lambda run: _start(run["job"]) if run["kind"] == "reshard"
               else None,
    "eval": lambda run: _largest(run["job"], "eval_seconds"),
    "export": lambda run: _largest(run["job"], "export_seconds"),
    "peak_train": lambda run: _largest(run["job"], "peak_train"),
    "peak_eval": lambda run: _largest(run["job"], "peak_eval"),
    "peak_export": lambda run: _largest(run["job"], "peak_export"),
    "ps_peak": lambda run: max(run["job"].get("ps_peaks", {}).values(),
                               default=None),
    "checkpoint_bytes": lambda run: _rank0(run["job"], "checkpoint_bytes"),
    "export_bytes": lambda run: _rank0(run["job"], "export_bytes"),
}


def table(result):
  """{(rows, ranks): {cost: {"value", "rounds"}, "reshard_from": n}}; a
  cell with failed jobs has their kinds in "failed"."""
  cells = {}
  for rows, runs in result.get("sizes", {}).items():
    for run in runs:
      cell = cells.setdefault((int(rows), run["ranks"]), {})
      if run["job"] is None:
        cell.setdefault("failed", []).append(run["kind"])
        continue
      if run["kind"] == "reshard":
        cell["reshard_from"] = run["from_ranks"]
      for cost, read in READERS.items():
        value = read(run)
        if value is not None:
          cell.setdefault(cost, []).append(value)
  for cell in cells.values():
    for cost in COSTS:
      if cost in cell:
        values = cell[cost]
        cell[cost] = {"value": statistics.median(values),
                      "rounds": len(values)}
  return cells


def series(cells, cost, ranks):
  """([rows], [value]) of one cost on `ranks` ranks, by rows."""
  points = sorted((rows, cell[cost]["value"])
                  for (rows, n), cell in cells.items()
                  if n == ranks and cost in cell)
  return [p[0] for p in points], [p[1] for p in points]


def peak(cell):
  """A process's largest resident bytes over every phase of the cell."""
  values = [cell[k]["value"] for k in ("peak_train", "peak_eval",
                                       "peak_export") if k in cell]
  return max(values) if values else None

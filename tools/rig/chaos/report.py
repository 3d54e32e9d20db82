"""docs/CHAOS.md's text from a run's JSON report, for any backend's run."""
from tools.rig.chaos import core
from tools.rig.chaos import fault_free
from tools.rig.chaos import horovod
from tools.rig.chaos import ps

_JOB = {
    "horovod": "An elastic Horovod job of {jobs} hosts (and a spare)",
    "ps_sync": ("A synchronous parameter-server job (`--ps_sync`) of {jobs} "
                "hosts, restarted by `estimator-scale-launch --max_restarts` "
                "from a host of its own,"),
    "ps_async": ("An asynchronous parameter-server job of {jobs} hosts, "
                 "restarted by `estimator-scale-launch --max_restarts` from "
                 "a host of its own,"),
    "slurm": ("A Horovod batch job on 2 of {jobs} Slurm nodes, requeued by "
              "Slurm from a lost node,"),
}
"""The job a report's `backend` ran, with {jobs}: the hosts it runs on."""

_TIMEOUT = {"horovod": horovod.COLLECTIVE_TIMEOUT,
            "ps_sync": ps.COLLECTIVE_TIMEOUT, "ps_async": ps.COLLECTIVE_TIMEOUT,
            "slurm": horovod.COLLECTIVE_TIMEOUT}

_ONCE = {
    "ps_async": "each worker's shard once a pass, in each session",
}
"""The exactly-once row's name where the backend claims less than each
example once an epoch over every restart."""


_TITLE = {"horovod": "Elastic Horovod", "ps_sync": "Synchronous parameter servers",
          "ps_async": "Asynchronous parameter servers", "slurm": "Slurm"}


def render(reports):
  """docs/CHAOS.md's text from runs' reports (one report, or a list of
  them, one per backend; a report without `backend` is elastic
  Horovod's)."""
  if isinstance(reports, dict):
    reports = [reports]
  sections = "\n".join(_section(r) for r in reports)
  return f"""# Chaos on the rig

Faults drawn from a seed into a training job on the rig's hosts, each
absorbed before the next ([many-hosts.md](many-hosts.md#chaos)), on one
machine of two cores that runs every host's processes. This page is
rendered from the runs' JSON reports (`docs/chaos.json` beside it) by
`python -m tools.rig.chaos --render docs/chaos.json`.

Recovery: seconds from the moment the job could see the fault (at once for
a kill, an out-of-memory kill or a join; after the collective timeout for a
stalled task or a cut link; once lifted for a slow host) to its next update,
in a new session where the fault needs one. An `oom` fault (opt-in:
`--kinds`) drops a host's memory ceiling under what it holds, so that the
kernel's OOM killer takes its biggest process, as on a machine the job
outgrew. The fault-free run trains the same worker, data,
seed and global batch in one process to the step of the chaos job's last
checkpoint; a synchronous job ends a run of a few hundred updates with its
weights but for the order of floating-point sums (tests/multihost/test_chaos.py),
while over thousands of updates the MLP job's {core.CASES['mlp']} randomly labelled examples,
memorised over and over, carry that last-bit difference up to the size of the
weights. The click job (`--case click`: a table sharded over the ranks or
split over the parameter servers for each of four id columns, on
{core.CASES['click']:,} generated clicks) is judged by what it is for: its
AUC on {fault_free.HELD_OUT:,} clicks of the eval split against the
fault-free run's.

During: the moment of the job a fault was aimed at, and the host whose
process had begun it and was held there until the fault was in
(`tools/rig/chaos/moments.py`): a checkpoint's save, the merge of the
sharded tables' parts on rank 0, or their re-shard as a new set of ranks
reads its rows (led in by a spare joining, whose recovery is then the next
fault's). Blank: at a random time.

{sections}"""


def _fault_free(report):
  compared = report.get("fault_free")
  if compared is None:
    return ("not compared: the global batch follows the ranks "
            "(`elastic_batch='scale'`), so no run at one batch is the same "
            "training" if report.get("backend", "horovod") == "horovod"
            else "not run")
  chaos, free = compared["chaos"], compared["fault_free"]
  if "auc" in chaos:
    return (f"step {compared['step']}: held-out AUC {chaos['auc']:.4f} "
            f"against {free['auc']:.4f} ({chaos['auc'] - free['auc']:+.4f}), "
            f"log loss {chaos['loss']:.4f} against {free['loss']:.4f}; "
            f"largest weight difference {compared['max_abs_diff']:.2g}")
  return (f"step {compared['step']}: largest weight difference "
          f"{compared['max_abs_diff']:.2g}; loss {chaos['loss']:.4f} against "
          f"{free['loss']:.4f}, accuracy {chaos['accuracy']:.4f} against "
          f"{free['accuracy']:.4f}")


def _section(report):
  backend = report.get("backend", "horovod")
  rows = "\n".join(
      f"| {f['began']:.0f} | {f['kind']} | {f['host']} | {_during(f)} | "
      + (f.get("note") or "not absorbed" if f["recovery"] is None
         else f"{f['recovery']:.1f}")
      + " |" for f in report["faults"])
  recoveries = [f["recovery"] for f in report["faults"]
                if f["recovery"] is not None]
  within = sum(r <= core.ABSORB_LIMIT for r in recoveries)
  job = _JOB[backend].format(jobs=report["hosts"] - 1)
  flag = "" if backend == "horovod" else f" --backend {backend}"
  if report.get("case", "mlp") != "mlp":
    flag = f" --case {report['case']}{flag}"
  once = _ONCE.get(backend, "each example once an epoch")
  errors = report.get("error_lines_at_end")
  return f"""## {_TITLE[backend]}

{job} under
`python -m tools.rig.chaos{flag} --seed {report['seed']} --minutes {report['minutes']:g} {_faults_from(report)}`
(collective timeout {_TIMEOUT[backend]} s), on {_count(report['hosts'])} hosts{_load(report)}.{_scheduled(report)}

| | |
|---|---|
| faults | {len(report['faults'])} of {len(report['kinds'])} kinds ({', '.join(report['kinds'])}) |
| updates | {report['updates']} ({report['epochs']} epochs of {report.get('examples', core.CASES['mlp'])} examples) |
| faults inside a moment | {_inside(report)} |
| restarts | {report['restarts']} |
| {once} | {'yes' if report['each_example_once'] else 'NO: ' + str(report['problem'])} |
| recoveries within {core.ABSORB_LIMIT} s | {within} of {len(recoveries)} (slowest {report['slowest_recovery'] or 0:.1f} s) |
| final model against the fault-free run | {_fault_free(report)} |
| job's exit code | {report['exit_code']} |
| error-looking log lines after the last fault | {'not checked' if errors is None else len(errors)} |
| processes left on the hosts | {sum(len(p) for p in report['processes_left'].values())} |
| namespaces left | {len(report['namespaces_left'])} |

{_notes(report)}| at (s) | fault | host | during | recovery (s) |
|---|---|---|---|---|
{rows}
"""


_MOMENT = {"save": "a save", "merge": "a merge of the tables' parts",
           "reshard": "a re-shard"}


def _during(fault):
  """The moment a fault landed in, and where the job was in it."""
  if not fault.get("moment"):
    return ""
  return f"{_MOMENT[fault['moment']]} on {fault['moment_host']}"


def _inside(report):
  """How many faults landed in each moment of the job, or none."""
  counts = {}
  for fault in report["faults"]:
    if fault.get("moment"):
      counts[fault["moment"]] = counts.get(fault["moment"], 0) + 1
  if not counts:
    return "none (faults at random times only)"
  return ", ".join(f"{n} in {_MOMENT[m]}" for m, n in counts.items())


def _faults_from(report):
  """The flag the faults came from: the seed's gaps, or a schedule."""
  if report.get("schedule"):
    return "--schedule SCHEDULE"
  return f"--gap {' '.join(f'{g:g}' for g in report['gap'])}"


def _scheduled(report):
  """Where a schedule gave the faults: its size and what it skipped."""
  if not report.get("schedule"):
    return ""
  skipped = report.get("skipped") or []
  said = "".join(f" {e['kind']} {e.get('host') or ''}: {e['why']}."
                 for e in skipped)
  return (f" The faults came from a schedule of {len(report['schedule'])} "
          f"(in the JSON report, SCHEDULE above), not from the seed's draws; "
          f"{len(skipped)} of them skipped, the job's state not allowing "
          f"them when they came.{said}")


def _notes(report):
  """What was measured about the run after it (a report's "notes")."""
  return "".join(f"{note}\n\n" for note in report.get("notes", ()))


def _load(report):
  """The machine's load averages as the run began and ended: recoveries
  are measured on it, with whatever else ran there."""
  if "load" not in report:
    return ""
  start, end = (", ".join(f"{x:.1f}" for x in l) for l in report["load"])
  return f"; load average {start} at the start, {end} at the end"


def _count(hosts):
  words = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}
  return words.get(hosts, str(hosts))

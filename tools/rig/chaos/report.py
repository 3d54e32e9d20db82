"""docs/CHAOS.md's text from a run's JSON report, for any backend's run."""
from tools.rig.chaos import core
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


def render(report):
  """docs/CHAOS.md's text from a run's report (a report without `backend`
  is elastic Horovod's)."""
  backend = report.get("backend", "horovod")
  rows = "\n".join(
      f"| {f['began']:.0f} | {f['kind']} | {f['host']} | "
      + ("not absorbed" if f["recovery"] is None else f"{f['recovery']:.1f}")
      + " |" for f in report["faults"])
  recoveries = [f["recovery"] for f in report["faults"]
                if f["recovery"] is not None]
  within = sum(r <= core.ABSORB_LIMIT for r in recoveries)
  job = _JOB[backend].format(jobs=report["hosts"] - 1)
  flag = "" if backend == "horovod" else f" --backend {backend}"
  once = _ONCE.get(backend, "each example once an epoch")
  return f"""# Chaos on the rig

{job} under
`python -m tools.rig.chaos{flag} --seed {report['seed']} --minutes {report['minutes']:g} --gap {' '.join(f'{g:g}' for g in report['gap'])}`:
faults drawn from the seed, each absorbed before the next
([many-hosts.md](many-hosts.md#chaos)), on one machine of two cores that
runs all {_count(report['hosts'])} hosts' processes. This page is rendered from the run's JSON
report (`docs/chaos.json` beside it) by
`python -m tools.rig.chaos --render REPORT`.

| | |
|---|---|
| faults | {len(report['faults'])} of {len(report['kinds'])} kinds ({', '.join(report['kinds'])}) |
| updates | {report['updates']} ({report['epochs']} epochs of {core.EXAMPLES} examples) |
| restarts | {report['restarts']} |
| {once} | {'yes' if report['each_example_once'] else 'NO: ' + str(report['problem'])} |
| recoveries within {core.ABSORB_LIMIT} s | {within} of {len(recoveries)} (slowest {report['slowest_recovery'] or 0:.1f} s) |
| job's exit code | {report['exit_code']} |
| processes left on the hosts | {sum(len(p) for p in report['processes_left'].values())} |
| namespaces left | {len(report['namespaces_left'])} |

Recovery: seconds from the moment the job could see the fault (at once for
a kill or a join; after the collective timeout, {_TIMEOUT[backend]} s, for a
stalled rank or a cut link; once lifted for a slow host) to its next update,
in a new session where the fault needs one.

| at (s) | fault | host | recovery (s) |
|---|---|---|---|
{rows}
"""


def _count(hosts):
  words = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}
  return words.get(hosts, str(hosts))

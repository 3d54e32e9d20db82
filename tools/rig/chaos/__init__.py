"""Chaos on the rig: a training job over hosts that die, drop off the
network, stall, slow down, join and come back, in an order and at moments
drawn from a seed, so that a run that fails replays with the same seed.

Each fault is one the framework handles alone (tests/multihost); what this
driver adds is their meeting during a long run, at moments the job does not
choose: a fault may land during a commit (the job commits every few
updates) or while a joined host still starts. Faults do not overlap: the
driver waits for the job to train again, and for a commit after that,
before the next one, so that each recovery is measured on its own.

The job is the exactly-once tests' worker (`tests.workers.position_run`),
every process of which logs the example ids of every update, so the driver
can count, over every restart, that each example of each finished epoch was
trained once (`tests.helpers.trained_ids`), or what the backend claims
instead; `--case` picks its network: a small MLP (the suite's runs) or a
click model with sharded tables, judged by its held-out AUC against a
fault-free run (`make chaos`). `--backend` picks the job: an elastic Horovod job
(horovod.py), a parameter-server job under `estimator-scale-launch
--max_restarts`, synchronous or not (ps.py), or a Horovod batch job under
Slurm's requeue (slurm_job.py).

  python -m tools.rig.chaos --case click --seed 7 --minutes 60 --report docs/chaos.json
  python -m tools.rig.chaos --backend ps_sync --seed 7 --minutes 60
  python -m tools.rig.chaos --backend slurm --schedule faults.json --minutes 30

A schedule of one's own (`--schedule`) replaces the seed's draws: its
faults go in in its order, each at its gap after the last recovery, with the
same checks after the run. `--kinds` narrows the kinds drawn, or adds an
opt-in one (`core.OPT_IN`: `oom`, the kernel's OOM killer at a host's
memory ceiling), which a seed never draws unless asked.

  python -m tools.rig.chaos --backend ps_sync --seed 7 --kinds kill_task,oom
"""
import argparse
import glob
import json
import os
import signal
import sys
import tempfile
import time

from tools.rig import cluster as cluster_lib
from tools.rig.chaos import core
from tools.rig.chaos import fault_free
from tools.rig.chaos import horovod
from tools.rig.chaos import ps
from tools.rig.chaos import slurm_job
from tools.rig.chaos.core import ABSORB_LIMIT, CASES, COMMIT, Fault
from tools.rig.chaos.horovod import COLLECTIVE_TIMEOUT, KINDS, RESTARTS, Chaos
from tools.rig.chaos.report import render

__all__ = ["ABSORB_LIMIT", "BACKEND_KINDS", "BACKENDS", "CASES", "COLLECTIVE_TIMEOUT", "COMMIT", "KINDS", "RESTARTS", "Chaos", "Fault", "main",
           "render", "run", "save"]
"""The driver's names as they were when it was one module (the elastic
Horovod job's), and the command's."""

BACKENDS = ("horovod", "ps_sync", "ps_async", "slurm")

HOSTS = {"horovod": 5, "ps_sync": 4, "ps_async": 4, "slurm": 4}
"""The rig's size for each backend: Horovod's four in the job and a spare;
the launcher's host and three in the job, whose lost hosts come back;
Slurm's controller and three nodes, two in the job."""


BACKEND_KINDS = {"horovod": horovod.KINDS, "ps_sync": ps.KINDS,
                 "ps_async": ps.KINDS, "slurm": slurm_job.KINDS}
"""The kinds each backend draws unless told (`core.OPT_IN` ones are asked
for)."""


def _driver(backend, rig, work_dir, seed, start_hosts, gap, kinds, log,
            case):
  if backend == "horovod":
    return horovod.Chaos(rig, work_dir, seed, start_hosts, gap, kinds, log,
                         case)
  if backend in ("ps_sync", "ps_async"):
    return ps.PsChaos(rig, work_dir, seed, backend == "ps_sync", gap, kinds,
                      log, case)
  return slurm_job.SlurmChaos(rig, work_dir, seed, gap, kinds, log, case)


def run(seed, minutes, hosts=None, start_hosts=4, gap=(60.0, 180.0),
        kinds=None, max_faults=None, work_dir=None, log=print,
        backend="horovod", case="mlp", schedule=None):
  """A chaos run of `backend`'s job of `case` (one of CASES) on a rig of
  `hosts` hosts (default: `HOSTS`); returns its report. `start_hosts`:
  Horovod's job starts on that many, the others spares. `schedule`: the
  faults to inject (`core.check_schedule`) instead of the seed's draws;
  the seed still draws how long a slow host or a full disk lasts.
  `kinds`: those to draw (default: the backend's, `BACKEND_KINDS`); an
  opt-in kind (`core.OPT_IN`) the schedule names is added."""
  if backend not in BACKENDS:
    raise ValueError(f"backend {backend!r} is not one of "
                     f"{', '.join(BACKENDS)}")
  if case not in CASES:
    raise ValueError(f"case {case!r} is not one of {', '.join(CASES)}")
  kinds = core.choose_kinds(BACKEND_KINDS[backend], kinds, schedule)
  hosts = hosts or HOSTS[backend]
  work_dir = work_dir or tempfile.mkdtemp(prefix="chaos-")
  load_at_start = os.getloadavg()
  # The job's model_dir is on a disk of its own, which a fault may fill;
  # Slurm's hosts are as tests/multihost/test_slurm.py makes them.
  with core.small_disk(os.path.join(work_dir, "model"), core.DISK[case]):
    with cluster_lib.Cluster(hosts,
                             loopback_hostname=backend != "slurm") as rig:
      chaos = _driver(backend, rig, work_dir, seed, start_hosts, gap, kinds,
                      log, case)
      if schedule is not None:
        core.check_schedule(schedule, chaos)
      chaos.arm_memory()
      chaos.start()
      try:
        chaos.run(minutes * 60, max_faults, schedule)
        exit_code = chaos.stop()
      finally:
        if chaos._job.poll() is None:  # pylint: disable=protected-access
          chaos._job.kill()  # pylint: disable=protected-access
      # The tasks end with their launcher; give them the limit to go.
      deadline = time.monotonic() + ABSORB_LIMIT
      while (any(chaos.left(h) for h in rig.hosts) and
             time.monotonic() < deadline):
        time.sleep(0.5)
      result = chaos.report(exit_code)
    # Where elastic Horovod's global batch follows its ranks
    # (elastic_batch="scale"), no run at one batch is the same training.
    if chaos.global_batch and exit_code == 0:
      result["fault_free"] = fault_free.compare(work_dir, chaos.global_batch,
                                                case)
  if schedule is not None:
    result["schedule"] = schedule
  result.update(backend=backend, seed=seed, minutes=minutes, gap=list(gap),
                hosts=hosts, work_dir=work_dir,
                load=[list(load_at_start), list(os.getloadavg())],
                namespaces_left=glob.glob(
                    f"/run/netns/{cluster_lib.NETNS_PREFIX}-{rig.name}-*"))
  return result


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--backend", choices=BACKENDS, default="horovod",
                      help="the job: elastic Horovod, parameter servers "
                      "under the launcher's restarts (synchronous or not), "
                      "or a Horovod batch job under Slurm's requeue")
  parser.add_argument("--case", choices=tuple(CASES), default="mlp",
                      help="the job's network and data: the MLP on random "
                      "labels, or the click model with sharded tables, "
                      "judged by its held-out AUC")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--minutes", type=float, default=60)
  parser.add_argument("--gap", type=float, nargs=2, default=(60, 180),
                      metavar=("MIN", "MAX"),
                      help="seconds between a fault's recovery and the next")
  parser.add_argument("--schedule", default=None, metavar="JSON",
                      help="a file of faults to inject in its order instead "
                      "of the seed's draws: a list of {\"after\": seconds "
                      "after the last recovery, \"kind\", optional "
                      "\"host\", optional \"during\": a moment}")
  parser.add_argument("--kinds", default=None, metavar="KIND,...",
                      type=lambda value: tuple(value.split(",")),
                      help="the fault kinds to draw (default: the "
                      "backend's); opt-in: " + ", ".join(core.OPT_IN) +
                      " (the OOM killer at a host's memory ceiling)")
  parser.add_argument("--report", default=None,
                      help="JSON file of reports, one per backend: this "
                      "run's replaces its backend's")
  parser.add_argument("--render", default=None, metavar="REPORT",
                      help="print docs/CHAOS.md from a report; run nothing")
  args = parser.parse_args(argv)
  if args.render:
    with open(args.render) as f:
      print(render(json.load(f)), end="")
    return
  # A SIGTERM (a timeout, a scheduler) unwinds as Ctrl-C does: the rig's
  # hosts and the job's disk go with it.
  signal.signal(signal.SIGTERM, lambda number, _: sys.exit(128 + number))
  schedule = None
  if args.schedule:
    try:
      with open(args.schedule, encoding="utf-8") as f:
        schedule = json.load(f)
    except (OSError, ValueError) as e:
      parser.error(f"--schedule={args.schedule}: {e}")
  try:
    core.choose_kinds(BACKEND_KINDS[args.backend], args.kinds)
  except ValueError as e:
    parser.error(f"--kinds: {e}")
  result = run(args.seed, args.minutes, gap=tuple(args.gap),
               backend=args.backend, case=args.case, schedule=schedule,
               kinds=args.kinds)
  if args.report:
    save(result, args.report)
  print(json.dumps(result, indent=1))


def save(result, path):
  """Puts `result` into the reports at `path` in place of its backend's."""
  try:
    with open(path) as f:
      reports = json.load(f)
  except FileNotFoundError:
    reports = []
  if isinstance(reports, dict):  # one report, as a file held before
    reports = [reports]
  reports = [r for r in reports
             if r.get("backend", "horovod") != result["backend"]] + [result]
  reports.sort(key=lambda r: BACKENDS.index(r.get("backend", "horovod")))
  with open(path, "w") as f:
    f.write(json.dumps(reports, indent=1) + "\n")

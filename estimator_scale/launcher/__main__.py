r"""Starts a TF_CONFIG cluster: N workers (a chief, ps tasks) here or on hosts.

  estimator-scale-launch --workers 2 -- \
      estimator-scale --distribution=multi_worker_mirrored --model_dir=/tmp/run
  estimator-scale-launch --hosts node1,node2:2 --ps 1 -- \
      /opt/venv/bin/python -m estimator_scale.cli \
      --distribution=parameter_server --model_dir=/shared/run

It imports no TensorFlow, so it starts at once and holds no TF memory.
A failed task or lost host stops every task (exit: that task's code); ps
tasks, which never exit, are stopped once training succeeds.

With --max_restarts R the job is elastic (elastic.py): after a failure it
restarts from the last checkpoint on the hosts still answering, down to
--min_workers, at most R times; a returning host joins at the next
checkpoint. Remote tasks run over ssh (remote.py).
"""
import argparse
import os
import sys

from estimator_scale.launcher import elastic
from estimator_scale.launcher import hosts as hosts_lib
from estimator_scale.launcher import job
from estimator_scale.launcher import remote


def _parser():
  parser = argparse.ArgumentParser(prog="estimator-scale-launch",
                                   description=__doc__.split("\n\n")[0])
  parser.add_argument("--workers", type=int, default=2,
                      help="workers on this machine (without --hosts)")
  parser.add_argument("--hosts", default=None,
                      help="HOST[:SLOTS],...: training tasks per host, over "
                      "ssh (the first is the chief with --chief or --ps); "
                      "HOST:0 runs parameter servers alone")
  parser.add_argument("--ps", type=int, default=0,
                      help="parameter servers (implies --chief)")
  parser.add_argument("--chief", action="store_true")
  parser.add_argument("--port", type=int, default=hosts_lib.DEFAULT_PORT,
                      help="first TF_CONFIG port on each host (--hosts)")
  parser.add_argument("--ssh_port", type=int, default=None)
  parser.add_argument("-x", dest="env", action="append", default=[],
                      metavar="NAME[=VALUE]",
                      help="also forward this variable to remote tasks")
  parser.add_argument("--timeout", type=float, default=None)
  parser.add_argument(
      "--max_restarts", type=int, default=None,
      help="elastic: restarts after failures, from the last checkpoint on "
      "the hosts that answer")
  parser.add_argument(
      "--min_workers", type=int, default=1,
      help="elastic: fewest training tasks to go on with")
  parser.add_argument(
      "--probe_every", type=float, default=10.0,
      help="elastic: seconds between probes of hosts outside the cluster")
  parser.add_argument(
      "--model_dir", default=None,
      help="elastic: the job's checkpoint directory, read for the resumed "
      "step (default: the command's --model_dir)")
  parser.add_argument("command", nargs=argparse.REMAINDER)
  return parser


def main(argv=None):
  """Parses `argv` (default: sys.argv), runs the job; its exit code."""
  parser = _parser()
  args = parser.parse_args(argv)
  command = args.command[1:] if args.command[:1] == ["--"] else args.command
  if not command:
    parser.error("give the command to run after --")
  if args.workers < 1:
    parser.error("--workers must be >= 1")
  if args.ps < 0:
    parser.error("--ps must be >= 0")
  if args.max_restarts is not None and args.max_restarts < 1:
    parser.error("--max_restarts must be >= 1")
  if args.min_workers < 1:
    parser.error("--min_workers must be >= 1")
  try:
    hosts = (hosts_lib.parse_hosts(args.hosts, args.ps) if args.hosts else
             [(None, args.workers)])
    remote.forwarded_environment(os.environ, args.env)
  except ValueError as e:
    parser.error(str(e))
  policy = elastic.PLAIN
  if args.max_restarts is not None:
    workers = hosts_lib.training_tasks(hosts)
    if args.min_workers > workers:
      parser.error(f"--min_workers {args.min_workers} is more than the job's "
                   f"{workers} training task(s)")
    policy = elastic.Policy(
        min_workers=args.min_workers, max_restarts=args.max_restarts,
        probe_every=args.probe_every,
        model_dir=args.model_dir or elastic.model_dir_of(command))
  with job.stopping_signals_recorded() as received:
    return job.run(command, hosts, args.ps, args.chief or args.ps > 0,
                   args.port, args.timeout, extra_env=args.env,
                   ssh_port=args.ssh_port, policy=policy, received=received)


def run():
  """Console-script entry point: `estimator-scale-launch`."""
  sys.exit(main())


if __name__ == "__main__":
  run()

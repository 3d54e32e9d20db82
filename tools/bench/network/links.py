"""The network bench's hosts and links: the rig, its shaping, and their model.

Both network measurements (allreduce-only runs and training rows) run on
hosts of tools/rig/cluster.py, each its own network namespace and
hostname with an sshd, because Horovod and TF_CONFIG jobs only take their
multi-host paths (ssh launch, one Gloo or gRPC connection per peer over a
real interface) between hosts. A link rate is tc's tbf on each host's
cable, both ways.
"""
import json
import os
import subprocess
import sys

from tools import repo
from tools.bench.network import scaling_model
from tools.rig import cluster as cluster_lib
CLUSTER_NAME = "netbench"
# Link rates per host, in tc's units; None leaves the veth unshaped.
RATES = {"unshaped": None, "1gbit": "1gbit", "100mbit": "100mbit"}
# The token bucket's burst, in seconds of traffic: tools/rig/cluster.py's
# 10 ms default lets resnet20's whole 1.1 MB exchange through at 1 Gbit/s
# at line speed; 1 ms (64 KiB at least) leaves the rate to the link.
BURST_S = 0.001


def names_in(text, known, flag):
  """The `known` names in a comma-separated `text`, checked, in known's
  order; a bad one is a ValueError naming `flag` and the valid names."""
  names = [n for n in text.split(",") if n]
  unknown = [n for n in names if n not in known]
  if unknown or not names:
    raise ValueError(f"{flag}={text!r}: expected some of {', '.join(known)}")
  return [n for n in known if n in names]


def rate_names(text, flag="--rates"):
  """The RATES keys in a comma-separated `text` (see names_in)."""
  return names_in(text, RATES, flag)


def bits_per_second(rate_name):
  """A shaped rate's bits/s (None for the unshaped link)."""
  rate = RATES[rate_name]
  if rate is None:
    return None
  return cluster_lib._rate_bytes(rate) * 8  # pylint: disable=protected-access


def shape(cluster, rate_name):
  """Sets every host's link of `cluster` to RATES[rate_name]."""
  rate = RATES[rate_name]
  for host in cluster.hosts:
    host.shape(rate, rate and cluster_lib.tbf_burst(rate, BURST_S))


def up(hosts, name=CLUSTER_NAME):
  """A bench's rig of `hosts` hosts, cluster `name`, started (a context
  manager)."""
  if os.geteuid() != 0:
    raise SystemExit(f"{name}: needs root for the rig "
                     "(network namespaces, tc, sshd); see tools/rig/cluster.py")
  return cluster_lib.Cluster(hosts, name=name).up()


def cpu_share(hosts, cores):
  """The share of a core each of `hosts` rig hosts gets on a machine of
  `cores` cores: the rig's hosts are namespaces of one machine, so past
  its core count they take turns."""
  return min(1.0, cores / hosts)


def link(rate_name, latency_s, unshaped_bandwidth, share=1.0):
  """scaling_model.Link of a rate: the shaped rate's TCP goodput and its
  token bucket's burst, or the bandwidth measured on the unshaped link;
  `share` is each host's share of a core (cpu_share).

  Every rate's CPU bandwidth is the unshaped link's: a veth has no wire of
  its own, so what an allreduce gets from it unshaped is what the hosts'
  cores can copy, and they copy as fast under a shaped rate.
  """
  rate = RATES[rate_name]
  if rate is None:
    return scaling_model.Link(unshaped_bandwidth, latency_s,
                              cpu_bandwidth=unshaped_bandwidth,
                              cpu_share=share)
  return scaling_model.Link(scaling_model.goodput(bits_per_second(rate_name)),
                            latency_s, cluster_lib.tbf_burst(rate, BURST_S),
                            cpu_bandwidth=unshaped_bandwidth, cpu_share=share)


_COUNT = """
import json, sys
import tensorflow as tf
from tools.bench.perf import kinds
model, params = kinds.load_model(sys.argv[1])
with tf.Graph().as_default():
  spec = {k: tf.compat.v1.placeholder(s.dtype, [None] + s.shape.as_list())
          for k, s in model.serving_features().items()}
  model.logits(spec, True, params)
  print(json.dumps(sum(v.shape.num_elements() * v.dtype.base_dtype.size
                       for v in tf.compat.v1.trainable_variables())))
"""


def gradient_bytes(model):
  """Bytes of `model`'s trainable variables: what an update exchanges.

  Counted in a subprocess, so that the bench's own process stays free of
  TensorFlow while it runs the measurements.
  """
  proc = subprocess.run([sys.executable, "-c", _COUNT, model],
                        cwd=repo.ROOT,
                        capture_output=True, text=True, check=False,
                        env=dict(os.environ, PYTHONPATH=repo.ROOT,
                                 TF_CPP_MIN_LOG_LEVEL="3"))
  if proc.returncode != 0:
    raise RuntimeError(f"counting {model}'s gradients failed: "
                       f"{proc.stderr.strip()[-2000:]}")
  return json.loads(proc.stdout.strip().splitlines()[-1])

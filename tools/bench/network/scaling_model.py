"""Time per update on N hosts: measured compute plus a ring allreduce.

The rig runs at most a few hosts on one 2-core machine, so what happens at 8
to 128 hosts is carried there on paper. This model is deliberately the
back-of-envelope one (docs/NETWORK.md checks it against allreduce-only runs
on 2-4 shaped hosts and against the 2-host training rows), so that its
predictions can be traced to inputs a user can measure on their own
cluster: the compute of one update, the link's goodput and its latency.

  update  = k x compute(micro-batch) + apply + exchange(gradient bytes)
  ring(b) = 2(N-1)/N x b / bandwidth + 2(N-1) x latency
  Horovod:    exchange = cycle / 2 + overhead + ring(0) + data(b)
  collective: exchange = overhead + data(b)
  data(b) = max(ring(c b) / 2, copies) + max(ring(c b) / 2, copies + sums)
            + min(ring(c b) / 2, sums) / depth + b x cpu / share
  copies  = (N-1)/N x c b / cpu_bandwidth
  sums    = (N-1)/N x b x reduce / share

with c the compression (bytes sent per gradient byte). A ring allreduce
sends each host 2(N-1)/N of the buffer and takes 2(N-1) steps
(reduce-scatter, then allgather), which is how Gloo's allreduce and
TensorFlow's CPU collectives move data. Horovod adds costs per exchange: a
tensor waits for the background thread's next cycle (half a cycle on
average, since an update ends at a random point of it), the ranks agree on
what is ready with a small allreduce of their ready lists before the data
moves (ring(0)). The rest of what an exchange costs the software, whatever
its size and the number of hosts, is `overhead`, read off small
allreduces; tf.distribute's collectives have one too (launching the
collective ops and their gRPC calls), though no cycle.

The data term's two halves differ. In both the wire and the hosts' cores
work at once, the cores copying the bytes through the network stack
(`cpu_bandwidth`: a link faster than it, such as the rig's unshaped veth,
is bound by the CPU); in the reduce-scatter half they also sum what
arrives, (N-1)/N of the gradients per host, which costs `reduce` per
gradient byte where the sum is done in software (Gloo's float16 sum
converts each value). Gloo pipelines that half, summing one segment (1 MiB
at most, 2 per host at least) while the next is on the wire, so the slower
side sets its time, plus one of the `depth` segments a host sums in turn
that the pipeline cannot hide (the first arrival or the last sum). CPU work
outside the ring is paid on top (`cpu`): compression's casts to and from
float16 before and after it, tf.distribute's copies of what it sends
through gRPC. So fp16 loses wherever its casts, and its sum beyond what the
wire hides, cost more than the wire time it saves. A rank's own CPU work,
its sums and casts, stretches where it gets less than a core (`share`, as
the rig's 3 or 4 hosts share 2 cores). A link shaped by tc's token bucket
(the rig's) lets its first `burst` bytes through at once after an idle
spell, which a real link does not: it is 0 unless a Link says otherwise.
`apply` is what an update costs once however many micro-batches it
accumulates (the optimizer's step over every variable), read off one
process's time per micro-batch at two values of k (`split_apply`). Weak-
scaling efficiency is 1-process time over N-host time at the same per-
replica micro-batch, against one process that neither accumulates nor
exchanges.

  python -m tools.bench.network.scaling_model --compute_ms 85 --megabytes 1.1 \
      --gbits 10,100 --hosts 8,16,32,64,128
"""
import argparse
import dataclasses
import math
import sys

# Payload per byte on the wire for a ring's TCP traffic over Ethernet at
# MTU 1500 with timestamps: a segment carries 1448 of its 1514 bytes, and
# the data flowing the other way (every host sends and receives alike)
# adds its 66-byte ACK per second segment. What a shaped rate leaves for
# data.
TCP_PAYLOAD_FRACTION = 1448 / (1514 + 66 / 2)
# The framework's HOROVOD_CYCLE_TIME default (backends/horovod/binding.py's
# HOROVOD_DEFAULTS, which imports TensorFlow; tests/unit/test_scaling_model.py
# keeps the two equal).
DEFAULT_CYCLE_S = 0.005
# Per ring step on a real cluster's TCP network (one switch hop and the
# kernel on both ends), an assumption the predictions state, not a figure
# measured here.
DEFAULT_CLUSTER_LATENCY_S = 25e-6
EXCHANGES = ("horovod", "collective")
# A GPU computes a resnet20 update this many times faster than one core of
# the bench's host; link.md (docs/NETWORK.md) gives the figures behind it.
GPU_SPEEDUP = 30
# Gloo's ring allreduce (gloo/allreduce.cc, kMaxSegmentSize) cuts the buffer
# into segments of at most this many bytes, 2 per host at least, and sums
# one segment while the next is on the wire.
MAX_SEGMENT_BYTES = 1 << 20


def goodput(bits_per_second):
  """Payload bytes/s each way a ring's TCP streams get from this link rate."""
  return bits_per_second / 8 * TCP_PAYLOAD_FRACTION


@dataclasses.dataclass(frozen=True)
class Link:
  """Each host's link: payload bytes/s each way, seconds per ring step,
  bytes a token bucket passes at once after an idle spell, the bytes/s at
  which the host's CPU moves data through its network stack (infinite: the
  CPU is never what bounds the link), and the share of a core a rank's own
  CPU work (its sums and casts) gets (below 1 where more ranks than cores
  share a machine, as the rig's 3 or 4 hosts share 2 cores)."""
  bandwidth: float
  latency: float
  burst: float = 0.0
  cpu_bandwidth: float = math.inf
  cpu_share: float = 1.0

  def __post_init__(self):
    if self.bandwidth <= 0:
      raise ValueError(f"bandwidth={self.bandwidth}: must be > 0 bytes/s")
    if self.latency < 0:
      raise ValueError(f"latency={self.latency}: must be >= 0 seconds")
    if self.burst < 0:
      raise ValueError(f"burst={self.burst}: must be >= 0 bytes")
    if self.cpu_bandwidth <= 0:
      raise ValueError(f"cpu_bandwidth={self.cpu_bandwidth}: must be > 0 "
                       "bytes/s")
    if not 0 < self.cpu_share <= 1:
      raise ValueError(f"cpu_share={self.cpu_share}: must be in (0, 1] "
                       "(a core's share)")


@dataclasses.dataclass(frozen=True)
class Recipe:
  """How a job exchanges gradients.

  exchange: "horovod" (cycle wait, negotiation, overhead) or "collective"
  (tf.distribute's all-reduce inside the step); compression: bytes sent per
  gradient byte (0.5 for fp16); accumulation_steps: micro-batches per
  exchange; cycle_s: Horovod's cycle time; overhead_s: the other fixed
  cost per exchange; cpu_s_per_byte: CPU time per gradient byte the
  exchange spends before or after the ring, where the wire cannot hide it;
  reduce_s_per_byte: CPU time per gradient byte a host sums in the ring,
  which overlaps the wire.
  """
  exchange: str = "horovod"
  compression: float = 1.0
  accumulation_steps: int = 1
  cycle_s: float = DEFAULT_CYCLE_S
  overhead_s: float = 0.0
  cpu_s_per_byte: float = 0.0
  reduce_s_per_byte: float = 0.0

  def __post_init__(self):
    if self.exchange not in EXCHANGES:
      raise ValueError(f"exchange={self.exchange!r}: expected one of "
                       f"{', '.join(EXCHANGES)}")
    if not 0 < self.compression <= 1:
      raise ValueError(f"compression={self.compression}: must be in (0, 1] "
                       "(0.5 for fp16)")
    if self.accumulation_steps < 1:
      raise ValueError(f"accumulation_steps={self.accumulation_steps}: "
                       "must be >= 1")
    if self.cycle_s < 0:
      raise ValueError(f"cycle_s={self.cycle_s}: must be >= 0")
    if self.overhead_s < 0:
      raise ValueError(f"overhead_s={self.overhead_s}: must be >= 0")
    for name in ("cpu_s_per_byte", "reduce_s_per_byte"):
      if getattr(self, name) < 0:
        raise ValueError(f"{name}={getattr(self, name)}: must be >= 0")


def _check_hosts(hosts):
  if not isinstance(hosts, int) or hosts < 1:
    raise ValueError(f"hosts={hosts!r}: must be an integer >= 1")


def _ring_bytes(nbytes, hosts):
  """What each host sends (and receives) in a ring allreduce of `nbytes`."""
  return 2 * (hosts - 1) / hosts * nbytes


def ring_seconds(nbytes, hosts, link):
  """One ring allreduce of `nbytes` over `hosts` hosts on the wire (0 on
  one host)."""
  _check_hosts(hosts)
  if hosts == 1:
    return 0.0
  sent = _ring_bytes(nbytes, hosts)
  return (max(0.0, sent - link.burst) / link.bandwidth +
          2 * (hosts - 1) * link.latency)


def pipeline_depth(nbytes, hosts):
  """Segments a host sums one after another in the reduce-scatter of Gloo's
  ring allreduce of `nbytes`: N-1 steps of its segments per host."""
  segments = max(math.ceil(nbytes / MAX_SEGMENT_BYTES), 2 * hosts)
  return (hosts - 1) * math.ceil(segments / hosts)


def data_seconds(nbytes, hosts, link, recipe=Recipe()):
  """An exchange's data term for `nbytes` of gradients: the ring's two
  halves and the CPU work outside it.

  In each half the wire and the CPU (copies, and in the reduce-scatter
  sums) overlap, the slower setting the time, but for one segment's sum
  that the pipeline cannot hide (the min term: the first segment arrives
  before any sum can start, and the last sum follows the last arrival).
  """
  _check_hosts(hosts)
  if hosts == 1:
    return 0.0
  sent = nbytes * recipe.compression
  half = ring_seconds(sent, hosts, link) / 2
  copies = _ring_bytes(sent, hosts) / 2 / link.cpu_bandwidth
  sums = ((hosts - 1) / hosts * nbytes * recipe.reduce_s_per_byte /
          link.cpu_share)
  reduce_scatter = (max(half, copies + sums) +
                    min(half, sums) / pipeline_depth(sent, hosts))
  return (max(half, copies) + reduce_scatter +
          nbytes * recipe.cpu_s_per_byte / link.cpu_share)


def exchange_seconds(nbytes, hosts, link, recipe=Recipe()):
  """One gradient exchange of `nbytes` (before compression)."""
  if hosts == 1:
    return 0.0
  data = data_seconds(nbytes, hosts, link, recipe)
  if recipe.exchange == "collective":
    return recipe.overhead_s + data
  return (recipe.cycle_s / 2 + recipe.overhead_s +
          ring_seconds(0, hosts, link) + data)


def update_seconds(compute_s, nbytes, hosts, link, recipe=Recipe(),
                   apply_s=0.0):
  """One update: k micro-batches of `compute_s` each, its apply, then one
  exchange."""
  return (recipe.accumulation_steps * compute_s + apply_s +
          exchange_seconds(nbytes, hosts, link, recipe))


def efficiency(compute_s, nbytes, hosts, link, recipe=Recipe(),
               alone_s=None, apply_s=0.0):
  """Weak-scaling efficiency: N hosts' examples/sec over N x one process's.

  alone_s: one process's update of one micro-batch, apply included, where a
  rank of the job computes slower than it (`compute_s` + `apply_s`)
  because its host has no core to spare for the job's communication
  threads; the same by default.
  """
  alone = compute_s + apply_s if alone_s is None else alone_s
  return (recipe.accumulation_steps * alone /
          update_seconds(compute_s, nbytes, hosts, link, recipe, apply_s))


def split_apply(k1_s, kn_s, n):
  """(compute per micro-batch, apply per update) from one process's seconds
  per micro-batch at k = 1 (`k1_s`) and at k = n (`kn_s`).

  The two times are compute + apply and compute + apply / n, so the
  difference is what accumulating n micro-batches saves by applying once;
  a negative one (noise) counts as no apply.
  """
  if not isinstance(n, int) or n < 2:
    raise ValueError(f"n={n!r}: needs an accumulation of 2 or more")
  if k1_s <= 0 or kn_s <= 0:
    raise ValueError(f"k1_s={k1_s}, kn_s={kn_s}: must be > 0 seconds")
  apply = max(0.0, (k1_s - kn_s) * n / (n - 1))
  return k1_s - apply, apply


def fit_small_allreduces(seconds_by_hosts, recipe=Recipe()):
  """(latency per ring step, Horovod overhead) from allreduces of ~0 bytes.

  A Horovod exchange of nothing takes cycle/2 + overhead + 4(N-1) latency
  (two rings of 2(N-1) steps), so a least-squares line through the times
  at several host counts gives the latency as its slope and the overhead
  as what its intercept leaves beyond half a cycle; both are floored at 0.

  Args:
    seconds_by_hosts: {hosts: seconds}, at least two host counts >= 2.
    recipe: the Horovod recipe the allreduces ran with (its cycle_s).
  """
  points = sorted(seconds_by_hosts.items())
  if len(points) < 2 or points[0][0] < 2:
    raise ValueError(f"seconds_by_hosts={seconds_by_hosts}: needs times at "
                     "two or more host counts, each >= 2")
  xs = [4 * (n - 1) for n, _ in points]
  ys = [t for _, t in points]
  mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
  slope = (sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) /
           sum((x - mean_x) ** 2 for x in xs))
  latency = max(0.0, slope)
  intercept = mean_y - latency * mean_x
  return latency, max(0.0, intercept - recipe.cycle_s / 2)


def break_even_bandwidth(nbytes, hosts, plain, other, cpu_bandwidth=math.inf,
                         lowest=1e5, highest=1e12):
  """The link bandwidth (bytes/s) below which `other`'s exchange of
  `nbytes` on `hosts` hosts is faster than `plain`'s, such as where fp16
  compression starts to pay; None if `other` is not faster even at
  `lowest`, infinite if it is still faster at `highest`.

  Found by bisection on the bandwidth's logarithm: a slower link only
  widens a recipe's lead that saves bytes.
  """
  def gain(bandwidth):
    link = Link(bandwidth, 0.0, cpu_bandwidth=cpu_bandwidth)
    return (exchange_seconds(nbytes, hosts, link, plain) -
            exchange_seconds(nbytes, hosts, link, other))

  if gain(lowest) <= 0:
    return None
  if gain(highest) > 0:
    return math.inf
  return bisect(lambda bandwidth: gain(bandwidth) > 0, lowest, highest,
                geometric=True)


def bisect(below, lowest, highest, geometric=False):
  """Where `below(x)` turns from true (at `lowest`) to false (at
  `highest`), found by halving the interval 100 times, on x's logarithm
  when `geometric` (for a range over many orders of magnitude)."""
  for _ in range(100):
    middle = (math.sqrt(lowest * highest) if geometric
              else (lowest + highest) / 2)
    lowest, highest = ((middle, highest) if below(middle)
                       else (lowest, middle))
  return lowest


def parse_numbers(text, kind, name):
  try:
    values = [kind(v) for v in text.split(",") if v]
  except ValueError:
    raise argparse.ArgumentTypeError(
        f"--{name}={text!r}: expected comma-separated numbers") from None
  if not values or min(values) <= 0:
    raise argparse.ArgumentTypeError(
        f"--{name}={text!r}: expected numbers > 0, e.g. 10,100")
  return values


def prediction_table(compute_s, nbytes, hosts, gbits, recipes,
                     latency=DEFAULT_CLUSTER_LATENCY_S, apply_s=0.0):
  """Markdown rows: efficiency per (link, hosts) for each named recipe."""
  lines = ["| link | hosts | " + " | ".join(recipes) + " |",
           "|---|---|" + "---|" * len(recipes)]
  for rate in gbits:
    link = Link(goodput(rate * 1e9), latency)
    for n in hosts:
      cells = [
          f"{efficiency(compute_s, nbytes, n, link, r, apply_s=apply_s):.2f}"
          for r in recipes.values()]
      lines.append(f"| {rate:g} Gbit/s | {n} | " + " | ".join(cells) + " |")
  return lines


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--compute_ms", type=float, required=True,
                      help="compute of one micro-batch, milliseconds")
  parser.add_argument("--apply_ms", type=float, default=0.0,
                      help="what an update costs once however many "
                           "micro-batches it accumulates (the optimizer's "
                           "apply), milliseconds")
  parser.add_argument("--megabytes", type=float, required=True,
                      help="gradient bytes per exchange, in 10^6 bytes")
  parser.add_argument("--gbits", default="10,100",
                      help="link rates per host, Gbit/s (comma-separated)")
  parser.add_argument("--hosts", default="8,16,32,64,128")
  parser.add_argument("--latency_us", type=float,
                      default=DEFAULT_CLUSTER_LATENCY_S * 1e6)
  parser.add_argument("--cycle_ms", type=float, default=DEFAULT_CYCLE_S * 1e3)
  parser.add_argument("--accumulation_steps", type=int, default=4)
  parser.add_argument("--fp16_cast_ns_per_byte", type=float, default=0.0,
                      help="fp16 compression's casts to and from float16, "
                           "CPU nanoseconds per gradient byte "
                           "(docs/NETWORK.md measures it)")
  parser.add_argument("--fp16_sum_ns_per_byte", type=float, default=0.0,
                      help="its float16 sum in the ring, CPU nanoseconds "
                           "per gradient byte summed (docs/NETWORK.md)")
  parser.add_argument("--collective_overhead_ms", type=float, default=0.0,
                      help="the collective's fixed cost per exchange, ms")
  parser.add_argument("--collective_ns_per_byte", type=float, default=0.0,
                      help="the collective's CPU cost per gradient byte, "
                           "nanoseconds (docs/NETWORK.md measures it)")
  args = parser.parse_args(argv)
  try:
    gbits = parse_numbers(args.gbits, float, "gbits")
    hosts = parse_numbers(args.hosts, int, "hosts")
    cycle = args.cycle_ms / 1e3
    recipes = {
        "Horovod": Recipe(cycle_s=cycle),
        "Horovod fp16": Recipe(
            cycle_s=cycle, compression=0.5,
            cpu_s_per_byte=args.fp16_cast_ns_per_byte / 1e9,
            reduce_s_per_byte=args.fp16_sum_ns_per_byte / 1e9),
        f"Horovod k={args.accumulation_steps}": Recipe(
            cycle_s=cycle, accumulation_steps=args.accumulation_steps),
        "collective": Recipe(
            exchange="collective",
            overhead_s=args.collective_overhead_ms / 1e3,
            cpu_s_per_byte=args.collective_ns_per_byte / 1e9)}
    if args.compute_ms <= 0 or args.megabytes <= 0:
      raise ValueError("--compute_ms and --megabytes must be > 0")
    if args.apply_ms < 0:
      raise ValueError(f"--apply_ms={args.apply_ms}: must be >= 0")
    print("\n".join(prediction_table(args.compute_ms / 1e3,
                                     args.megabytes * 1e6, hosts, gbits,
                                     recipes, args.latency_us / 1e6,
                                     args.apply_ms / 1e3)))
    for n in hosts:
      bandwidth = break_even_bandwidth(args.megabytes * 1e6, n,
                                       recipes["Horovod"],
                                       recipes["Horovod fp16"])
      print(f"{n} hosts: fp16 compression pays " +
            ("never" if bandwidth is None else "at any bandwidth (no CPU "
             "cost given)" if bandwidth == math.inf else
             f"below {bandwidth * 8 / 1e9:.3g} Gbit/s per host"))
  except (ValueError, argparse.ArgumentTypeError) as e:
    parser.error(str(e))


if __name__ == "__main__":
  sys.exit(main())

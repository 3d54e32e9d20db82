"""What an embedding table's exchange costs per update, by where it lives.

scaling_model.py prices the dense gradients' ring allreduce; a table's rows
travel otherwise, and how depends on its placement. For u distinct ids a
rank looks up per update, rows of d values of `value_bytes` and ids of
`ID_BYTES`, on N hosts of one rank each, what each rank sends:

  replicated (Horovod's sparse path, backends/horovod/reducer.py): the
    rank's rows and their ids are allgathered, and Gloo's ring forwards
    everyone else's, so each rank sends (N-1) u (d v + i). Its "auto" mode
    turns dense once the rows gathered, N u, exceed the table's R rows: a
    ring allreduce of the table and a count per row, 2(N-1)/N R (d + 1) v.
  sharded (`es.sharded_embedding`): three all-to-alls, each sending the
    (N-1)/N of its payload that belongs to other ranks: the ids to their
    owners, the rows back, and in the backward pass the rows' gradients
    to their owners: (N-1)/N u (i + 2 d c), c the bytes per value on the
    wire (2 with fp16 compression).
  parameter_server: the worker sends the ids to the ps tasks holding them
    and, after the step, their gradients with the ids again, u (2 i + d v);
    it receives the rows, u d v. Neither depends on the table's size.

Replicated over sharded is about N (d v + i) / (i + 2 d v), so sharding
sends fewer bytes from N = 2 on (barely: 2 x 136 / 264 = 1.03 at d = 32)
and N/2 times fewer on many hosts. It pays for that with latency: its two
forward all-to-alls sit between the lookup and the rest of the network,
each a Horovod exchange of its own (half a cycle of wait, the negotiation,
the overhead), and the backward one is a third; a replicated table's
allgather rides in the update's one exchange. So at few ids per update
replication is the faster, and sharding wins where the bytes saved take
longer on the wire than two more exchanges' fixed costs
(`break_even_ids`), or wherever the table and its slots do not fit one
rank, which is what sharding is for.

  python -m tools.bench.network.embedding_model --dimension 32 \
      --ids 256,4096,65536 --hosts 2,4,8,32 --gbits 0.1,10
"""
import argparse
import math
import sys

from tools.bench.network import scaling_model as sm

ID_BYTES = 8  # int64 ids, as feature columns and hashing give them
PLACEMENTS = ("replicated", "sharded", "parameter_server")


def _check(unique_ids, dimension, hosts):
  if unique_ids < 0:
    raise ValueError(f"unique_ids={unique_ids}: must be >= 0")
  if dimension < 1:
    raise ValueError(f"dimension={dimension}: must be >= 1")
  if not isinstance(hosts, int) or hosts < 1:
    raise ValueError(f"hosts={hosts!r}: must be an integer >= 1")


def bytes_sent(placement, unique_ids, dimension, hosts, table_rows=None,
               value_bytes=4, wire_value_bytes=None):
  """Bytes one rank (or PS worker) sends per update for one table.

  Args:
    placement: one of PLACEMENTS.
    unique_ids: distinct ids the rank looks up per update.
    dimension: values per row.
    hosts: ranks (one per host); a parameter-server worker's count does
      not change what it sends.
    table_rows: the table's rows, for the replicated table's dense switch
      (None: never dense).
    value_bytes: bytes per value in memory.
    wire_value_bytes: bytes per value on the wire of the sharded exchange
      (2 for fp16 compression; default `value_bytes`).
  """
  _check(unique_ids, dimension, hosts)
  if placement == "parameter_server":
    return unique_ids * (2 * ID_BYTES + dimension * value_bytes)
  if placement not in PLACEMENTS:
    raise ValueError(f"placement={placement!r}: expected one of "
                     f"{', '.join(PLACEMENTS)}")
  if hosts == 1:
    return 0.0
  if placement == "sharded":
    wire = value_bytes if wire_value_bytes is None else wire_value_bytes
    return (hosts - 1) / hosts * unique_ids * (ID_BYTES + 2 * dimension * wire)
  if table_rows is not None and hosts * unique_ids > table_rows:
    return 2 * (hosts - 1) / hosts * table_rows * (dimension + 1) * value_bytes
  return (hosts - 1) * unique_ids * (dimension * value_bytes + ID_BYTES)


def bytes_received(placement, unique_ids, dimension, hosts, table_rows=None,
                   value_bytes=4, wire_value_bytes=None):
  """Bytes one rank (or PS worker) receives per update for one table: what
  it sends, but for a parameter-server worker, which receives only the
  rows (`bytes_sent`'s arguments)."""
  if placement == "parameter_server":
    _check(unique_ids, dimension, hosts)
    return unique_ids * dimension * value_bytes
  return bytes_sent(placement, unique_ids, dimension, hosts, table_rows,
                    value_bytes, wire_value_bytes)


def exchange_seconds(placement, unique_ids, dimension, hosts, link,
                     recipe=sm.Recipe(), table_rows=None, value_bytes=4,
                     wire_value_bytes=None):
  """The time a Horovod update spends moving one table's rows, beyond the
  dense gradients' exchange: the bytes on the wire, (N-1) latency steps
  per all-to-all or ring pass, and for a sharded table the fixed costs of
  its three all-to-alls (the replicated allgather shares the update's
  exchange, whose fixed costs scaling_model already counts)."""
  if placement not in ("replicated", "sharded"):
    raise ValueError(f"placement={placement!r}: this prices Horovod's "
                     "replicated or sharded tables")
  nbytes = bytes_sent(placement, unique_ids, dimension, hosts, table_rows,
                      value_bytes, wire_value_bytes)
  if hosts == 1:
    return 0.0
  wire = nbytes / link.bandwidth
  if placement == "replicated":
    return wire + (hosts - 1) * link.latency
  fixed = recipe.cycle_s / 2 + recipe.overhead_s + sm.ring_seconds(
      0, hosts, link)
  return wire + 3 * (fixed + (hosts - 1) * link.latency)


def break_even_ids(dimension, hosts, link, recipe=sm.Recipe(),
                   highest=1 << 30):
  """The ids per update above which a sharded table's exchange is faster
  than a replicated one's (no dense switch); None if it never is up to
  `highest`."""
  def replicated_faster(ids):
    return (exchange_seconds("replicated", ids, dimension, hosts, link,
                             recipe) <=
            exchange_seconds("sharded", ids, dimension, hosts, link, recipe))

  if replicated_faster(highest):
    return None
  return math.ceil(sm.bisect(replicated_faster, 1, highest, geometric=True))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--dimension", type=int, default=32)
  parser.add_argument("--ids", default="256,4096,65536",
                      help="distinct ids a rank looks up per update")
  parser.add_argument("--hosts", default="2,4,8,32")
  parser.add_argument("--gbits", default="0.1,10",
                      help="link rates per host, Gbit/s")
  parser.add_argument("--latency_us", type=float,
                      default=sm.DEFAULT_CLUSTER_LATENCY_S * 1e6)
  parser.add_argument("--overhead_ms", type=float, default=1.3,
                      help="Horovod's fixed cost per exchange beyond half "
                           "its cycle (docs/NETWORK.md measures it)")
  args = parser.parse_args(argv)
  try:
    ids = sm.parse_numbers(args.ids, int, "ids")
    hosts = sm.parse_numbers(args.hosts, int, "hosts")
    gbits = sm.parse_numbers(args.gbits, float, "gbits")
    if args.dimension < 1:
      raise ValueError(f"--dimension={args.dimension}: must be >= 1")
  except (ValueError, argparse.ArgumentTypeError) as e:
    parser.error(str(e))
  recipe = sm.Recipe(overhead_s=args.overhead_ms / 1e3)
  print("| link | hosts | ids | replicated KB | sharded KB | PS worker KB | "
        "replicated ms | sharded ms |")
  print("|---|---|---|---|---|---|---|---|")
  for rate in gbits:
    link = sm.Link(sm.goodput(rate * 1e9), args.latency_us * 1e-6)
    for n in hosts:
      for u in ids:
        kb = [bytes_sent(p, u, args.dimension, n) / 1e3 for p in PLACEMENTS]
        ms = [exchange_seconds(p, u, args.dimension, n, link, recipe) * 1e3
              for p in ("replicated", "sharded")]
        print(f"| {rate:g} Gbit/s | {n} | {u} | {kb[0]:.1f} | {kb[1]:.1f} | "
              f"{kb[2]:.1f} | {ms[0]:.2f} | {ms[1]:.2f} |")
  for rate in gbits:
    link = sm.Link(sm.goodput(rate * 1e9), args.latency_us * 1e-6)
    for n in hosts:
      even = break_even_ids(args.dimension, n, link, recipe)
      print(f"{rate:g} Gbit/s, {n} hosts: sharding's exchange is faster " +
            ("never (by time; it still divides the memory)" if even is None
             else f"from {even} ids per rank per update"))


if __name__ == "__main__":
  sys.exit(main())

"""The billion-id plan: the measured per-row costs multiplied out.

Every cost here is a fitted line's slope per row, scaled by bytes: a row
of dimension 64 holds 4x the bytes of one of 16, and saving, reading and
copying a table are work on bytes, so its per-row cost is taken as 4x the
measured one. The ranks measured shared one machine's cores and disk, so
a rate per table row on the most ranks is this machine's rate; a host of
the plan is assumed to write and read its own share at that rate, all
hosts at once, as the ranks do (every rank saves and restores its own rows;
rank 0's merge renames their files, copying no row). An export is
written by the chief alone, so its time is the whole table's. A delta
save's line is the one on the most ranks measured, against the rows a
rank holds, so its figure is a host's share at that rate.
"""
import math

from tools.bench.table_costs import figures
from tools.bench.table_costs import fit

IDS = 10**9
DIMENSION = 64
HOSTS = (10, 50, 100)
HOST_MEMORY_GIB = (64, 128, 256)
GIB = 1 << 30


def row_bytes(dimension, slots=1):
  """A row and its optimizer slots, float32."""
  return 4 * dimension * (1 + slots)


def memory_line(cells):
  """(ranks, (base bytes, bytes per row held)) of a process's peak over
  every phase against the rows of its share, on the most ranks measured
  at two sizes or more: a billion ids run on many ranks, and one rank
  holds its whole table in another way (its own checkpoint, no
  exchange)."""
  for ranks in sorted({n for _, n in cells}, reverse=True):
    points = [(rows / n, figures.peak(cell)) for (rows, n), cell
              in cells.items() if n == ranks and figures.peak(cell)]
    if len(points) >= 2:
      return ranks, fit.line(*zip(*points))
  return None, None


def widest(cells, cost):
  """The largest rank count with a line of `cost`, and that line's
  growth, or (None, None)."""
  counts = sorted({ranks for (_, ranks), cell in cells.items()
                   if cost in cell}, reverse=True)
  for ranks in counts:
    xs, ys = figures.series(cells, cost, ranks)
    if len(xs) >= 2:
      return ranks, fit.growth(xs, ys)
  return None, None


def plan(cells, dimension, ids=IDS, target_dimension=DIMENSION,
         hosts=HOSTS, deltas=None, deltas_dimension=None):
  """{"assumptions": {...}, "rows": [{hosts, ...}], "hosts_for": {GiB:
  hosts}} for `ids` ids of `target_dimension`, one rank per host; None
  without the figures. `deltas` is {touched: growth} of delta saves
  measured at `deltas_dimension` (default `dimension`); each row then has
  "delta_seconds": {touched: seconds} for its share."""
  scale = row_bytes(target_dimension) / row_bytes(dimension)
  memory_ranks, memory = memory_line(cells)
  lines = {cost: widest(cells, cost) for cost in (
      "save", "restore", "reshard", "export", "export_bytes")}
  if memory is None or any(g is None for _, g in lines.values()):
    return None
  base, per_row = memory
  headroom = per_row / row_bytes(dimension)
  table = ids * row_bytes(target_dimension)

  def seconds(cost, rows):
    growth = lines[cost][1]
    return growth["intercept"] + growth["slope"] * scale * rows

  rows = []
  for count in hosts:
    share = ids / count
    rows.append({
        "hosts": count, "rows_per_host": share,
        "table_bytes_per_host": table / count,
        "memory_per_host": base + per_row * scale * share,
        "save_seconds": seconds("save", share),
        "restore_seconds": seconds("restore", share),
        "reshard_seconds": seconds("reshard", share),
        "export_seconds": seconds("export", ids),
        "export_bytes": lines["export_bytes"][1]["slope"] * scale * ids})
    if deltas:
      delta_scale = row_bytes(target_dimension) / row_bytes(
          deltas_dimension or dimension)
      rows[-1]["delta_seconds"] = {
          touched: g["intercept"] + g["slope"] * delta_scale * share
          for touched, g in sorted(deltas.items())}
  hosts_for = {gib: math.ceil(per_row * scale * ids / (gib * GIB - base))
               for gib in HOST_MEMORY_GIB if gib * GIB > base}
  return {"assumptions": {
      "scale": scale, "table_bytes": table, "base_bytes": base,
      "bytes_per_row_held": per_row, "headroom": headroom,
      "ranks_of": {"memory": memory_ranks,
                   **{cost: ranks for cost, (ranks, _) in lines.items()}},
      "slopes": {cost: g["slope"] for cost, (_, g) in lines.items()},
      "faster": sorted(cost for cost, (_, g) in lines.items()
                       if g["verdict"] == "faster"),
      "save_bandwidth": (row_bytes(dimension) / lines["save"][1]["slope"]
                         if lines["save"][1]["slope"] > 0 else None),
      "restore_bandwidth": (row_bytes(dimension) /
                            lines["restore"][1]["slope"]
                            if lines["restore"][1]["slope"] > 0 else None)},
          "rows": rows, "hosts_for": hosts_for}

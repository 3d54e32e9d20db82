r"""The Parquet converter's peak memory against one row group's decoded size.

Writes a click-shaped Parquet file (a label, 13 float columns, 26 int64 ids
and a list of int64 ids per row), one row group at a time, converts it with
`python -m estimator_scale.parquet` in a child process and prints the peak
resident memory of the largest process and of all of them together
(sampled from /proc), each over one row group's decoded (Arrow) size:

  nice -n 10 .venv/bin/python -m tools.bench.parquet_memory --gigabytes=1
  .venv/bin/python -m tools.bench.parquet_memory --gigabytes=0.2 \
      --row_group_rows=300000

The converter holds one row group at a time per process, so the largest
process should stay under 2x; the total grows with --processes.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FLOATS = 13
IDS = 26
HISTORY = 10
"""At most this many ids in a row's list column."""


def row_group(rng, rows):
  """One row group of click-shaped columns."""
  columns = {"clicked": rng.integers(0, 2, rows)}
  for i in range(FLOATS):
    columns[f"I{i + 1}"] = rng.standard_normal(rows, np.float32)
  for i in range(IDS):
    columns[f"C{i + 1}"] = rng.integers(0, 1 << 40, rows)
  lengths = rng.integers(0, HISTORY + 1, rows)
  offsets = np.zeros(rows + 1, np.int32)
  np.cumsum(lengths, out=offsets[1:])
  columns["history"] = pa.ListArray.from_arrays(
      offsets, rng.integers(0, 1 << 40, int(offsets[-1])))
  return pa.table(columns)


def write(path, target_bytes, rows_per_group, seed=0):
  """Writes row groups until the file reaches `target_bytes`; returns (rows,
  row groups, the largest row group's decoded bytes)."""
  rng = np.random.default_rng(seed)
  rows = groups = largest = 0
  with pa.OSFile(path, "wb") as sink:
    writer = None
    while not groups or sink.tell() < target_bytes:
      table = row_group(rng, rows_per_group)
      writer = writer or pq.ParquetWriter(sink, table.schema)
      writer.write_table(table, row_group_size=rows_per_group)
      rows, groups = rows + table.num_rows, groups + 1
      largest = max(largest, table.nbytes)
    writer.close()
  return rows, groups, largest


def _tree(root):
  """{pid: (resident bytes, peak resident bytes)} of `root` and every
  process below it, from /proc."""
  children = {}
  for name in os.listdir("/proc"):
    if name.isdigit():
      try:
        with open(f"/proc/{name}/stat", encoding="ascii") as f:
          parent = int(f.read().rsplit(")", 1)[1].split()[1])
      except (OSError, IndexError, ValueError):
        continue
      children.setdefault(parent, []).append(int(name))
  memory, todo = {}, [root]
  while todo:
    pid = todo.pop()
    todo.extend(children.get(pid, []))
    try:
      with open(f"/proc/{pid}/status", encoding="ascii") as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
      memory[pid] = tuple(int(fields[key].split()[0]) * 1024
                          for key in ("VmRSS", "VmHWM"))
    except (OSError, KeyError, ValueError):
      pass
  return memory


def convert(source, output, processes):
  """Runs the converter; returns (seconds, peak RSS of its largest process,
  peak RSS of all its processes at once), bytes.

  Peaks are sampled from /proc (each process's own high-water mark), not
  taken from getrusage: a child's ru_maxrss also counts the pages it
  shared with this process when it was forked, and this process has just
  written the file.
  """
  command = [sys.executable, "-m", "estimator_scale.parquet",
             f"--input={source}", f"--output={output}",
             f"--processes={processes}"]
  started = time.monotonic()
  child = subprocess.Popen(command)
  peaks, total = {}, 0
  while child.poll() is None:
    memory = _tree(child.pid)
    for pid, (_, high) in memory.items():
      peaks[pid] = max(peaks.get(pid, 0), high)
    total = max(total, sum(rss for rss, _ in memory.values()))
    time.sleep(0.05)
  if child.returncode:
    raise SystemExit(f"the converter failed: {' '.join(command)}")
  return time.monotonic() - started, max(peaks.values()), total


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--gigabytes", type=float, default=1.0,
                      help="the Parquet file's size on disk")
  parser.add_argument("--row_group_rows", type=int, default=1 << 20,
                      help="default: pyarrow's own")
  parser.add_argument("--processes", type=int, default=1,
                      help="the converter's --processes")
  parser.add_argument("--dir", default=None,
                      help="where the files go (default: a temp folder, "
                      "removed after)")
  args = parser.parse_args(argv)
  folder = args.dir or tempfile.mkdtemp(prefix="parquet_memory-")
  try:
    source = os.path.join(folder, "clicks.parquet")
    rows, groups, group_bytes = write(source, args.gigabytes * 1e9,
                                      args.row_group_rows)
    file_bytes = os.path.getsize(source)
    seconds, largest, total = convert(source, os.path.join(folder, "out"),
                                      args.processes)
  finally:
    if not args.dir:
      shutil.rmtree(folder, ignore_errors=True)
  mib = 1 << 20
  print(f"parquet: {file_bytes / mib:.0f} MiB "
        f"on disk, {rows} rows in {groups} row groups of "
        f"{args.row_group_rows} rows, one row group decoded "
        f"{group_bytes / mib:.0f} MiB")
  print(f"converted in {seconds:.1f} s ({rows / seconds:,.0f} records/s) "
        f"with --processes={args.processes}")
  print(f"peak RSS, largest process: {largest / mib:.0f} MiB = "
        f"{largest / group_bytes:.2f}x one row group")
  print(f"peak RSS, all processes at once: {total / mib:.0f} MiB = "
        f"{total / group_bytes:.2f}x one row group")
  return largest / group_bytes


if __name__ == "__main__":
  main()

"""Parquet partitions into TFRecord partitions, one process per core; each
partition's `_SUCCESS` marker is written last."""
import ctypes
import dataclasses
import glob
import multiprocessing
import os
import time

import pyarrow as pa
import pyarrow.parquet as pq

from estimator_scale import errors
from estimator_scale.parquet import example
from estimator_scale.parquet import schema
from estimator_scale.parquet import spec
from estimator_scale.parquet import tfrecord

MARKER = "_SUCCESS"
"""Written last into a finished partition (Spark's name for it)."""

BATCH_BYTES = 1 << 20
"""About how many decoded bytes are encoded at once: the encoding's own
memory (some ten times this) stays small beside the row group's."""


@dataclasses.dataclass(frozen=True)
class Partition:
  """A folder of Parquet files, `name` its path under the input root."""
  name: str
  files: tuple


@dataclasses.dataclass(frozen=True)
class _Task:
  """Row groups [first, end) of one file into one TFRecord file."""
  source: str
  first: int
  end: int
  target: str
  features: dict
  nulls: str


def _hidden(name):
  return name.startswith(("_", "."))


def find_partitions(input_path):
  """The partitions under `input_path` (a file or a folder), by name.

  Raises:
    DataError: no such path, or no Parquet file in it.
  """
  if os.path.isfile(input_path):
    return [Partition("", (input_path,))]
  if not os.path.isdir(input_path):
    raise errors.DataError(f"input={input_path}: no such file or folder")
  partitions = []
  for folder, subfolders, names in os.walk(input_path):
    subfolders[:] = sorted(d for d in subfolders if not _hidden(d))
    files = sorted(os.path.join(folder, name) for name in names
                   if name.endswith(".parquet") and not _hidden(name))
    if files:
      name = os.path.relpath(folder, input_path)
      partitions.append(Partition("" if name == "." else name, tuple(files)))
  if not partitions:
    raise errors.DataError(
        f"input={input_path}: no .parquet files in it or in its folders "
        "(such as day=YYYY-MM-DD/; names starting with _ or . are skipped)")
  return sorted(partitions, key=lambda p: p.name)


def landed(partitions, input_path, log):
  """The partitions Spark has finished writing; converting half of one would
  mark it finished for good."""
  marked = [os.path.exists(os.path.join(input_path, p.name, MARKER))
            for p in partitions]
  if not any(marked):
    return partitions
  for partition, done in zip(partitions, marked):
    if not done:
      log(f"{partition.name or input_path}: no {MARKER} in the input yet "
          "(still being written), skipped; a later run converts it")
  return [p for p, done in zip(partitions, marked) if done]


def _file_features(path, nulls):
  try:
    arrow_schema = pq.read_schema(path)
  except (pa.ArrowException, OSError) as e:
    raise errors.DataError(f"{path}: not a readable Parquet file ({e})") from None
  return schema.features(arrow_schema, nulls, path)


def read_features(partitions, nulls, converted=None):
  """{name: spec.Feature} of every partition's files, which must agree with
  each other and with `converted`.

  Raises:
    DataError: naming the file and column that differs.
  """
  merged, first_where = converted or (None, None)
  for partition in partitions:
    partition_first = None
    for path in partition.files:
      found = _file_features(path, nulls)
      if partition_first is None:
        partition_first = (found, path)
      else:
        schema.check_same(*partition_first, found, path,
                          "one partition's files")
      if merged is None:
        merged, first_where = dict(found), path
      schema.check_same(merged, first_where, found, path,
                        "the partitions of one output root")
      for name, feature in found.items():
        if merged[name].default is None and feature.default is not None:
          merged[name] = dataclasses.replace(merged[name],
                                             default=feature.default)
  return merged


def _tasks(partition, features, nulls, output_dir, processes):
  """The partition's work in about `processes` pieces, or one per file."""
  counts = []
  for path in partition.files:
    counts.append(pq.ParquetFile(path).metadata.num_row_groups)
  per_task = max(1, -(-sum(counts) // processes))
  tasks = []
  for path, count in zip(partition.files, counts):
    for first in range(0, count, per_task):
      target = os.path.join(output_dir, f"part-{len(tasks):05d}.tfrecord")
      tasks.append(_Task(path, first, min(count, first + per_task), target,
                         features, nulls))
  return tasks


def _row_group(parquet_file, group, columns):
  """One row group, read a column at a time to hold it once."""
  return pa.table({
      name: parquet_file.read_row_group(group, columns=[name],
                                        use_threads=False).column(0)
      for name in columns})


def _write_row_group(parquet_file, group, task, out):
  """Appends one row group's records to `out`; returns how many."""
  table = _row_group(parquet_file, group, task.features)
  rows = max(64, BATCH_BYTES * table.num_rows // max(1, table.nbytes))
  where = f"{task.source}, row group {group}"
  for batch in table.to_batches(max_chunksize=rows):
    encoded = example.encode(batch, task.features, task.nulls, where)
    out.write(tfrecord.frame(encoded))
  return table.num_rows


def give_back_freed_memory():
  """Makes freed memory leave the process at once (process-wide: converters
  only)."""
  pa.set_memory_pool(pa.system_memory_pool())
  try:
    libc = ctypes.CDLL("libc.so.6")
  except OSError:  # not glibc: its own allocator's habits
    return
  libc.mallopt(-3, 1 << 16)  # M_MMAP_THRESHOLD, fixed: no more raising
  libc.mallopt(-1, 0)  # M_TRIM_THRESHOLD: the heap's freed top goes back


def _run(task):
  """Converts one task in this process; returns (target, records)."""
  records = 0
  parquet_file = pq.ParquetFile(task.source, buffer_size=1 << 20)
  temporary = os.path.join(os.path.dirname(task.target),
                           f".{os.path.basename(task.target)}.tmp-{os.getpid()}")
  with open(temporary, "wb") as out:
    for group in range(task.first, task.end):
      records += _write_row_group(parquet_file, group, task, out)
    out.flush()
    os.fsync(out.fileno())
  os.replace(temporary, task.target)
  return task.target, records


def _start_over(output_dir):
  """Removes what an interrupted run left in a partition's folder."""
  os.makedirs(output_dir, exist_ok=True)
  for path in glob.glob(os.path.join(output_dir, "part-*.tfrecord")) + \
      glob.glob(os.path.join(output_dir, ".part-*.tfrecord.tmp-*")):
    os.remove(path)


def _mark(output_dir):
  path = os.path.join(output_dir, MARKER)
  temporary = f"{path}.tmp-{os.getpid()}"
  with open(temporary, "w", encoding="utf-8"):
    pass
  os.replace(temporary, path)


def convert(input_path, output_path, processes=None, nulls="fill",
            log=print):
  """Converts every unfinished partition under `input_path`.

  Returns {partition name: records written, or None where already done}.

  Raises:
    DataError: a file or column that cannot be converted, named.
    ConfigError: `processes` or `nulls` out of range.
  """
  processes = processes or os.cpu_count() or 1
  if processes < 1:
    raise errors.ConfigError(f"processes={processes}: want 1 or more")
  if nulls not in schema.NULLS:
    raise errors.ConfigError(f"nulls={nulls!r}: want one of {schema.NULLS}")
  partitions = landed(find_partitions(input_path), input_path, log)
  spec_path = os.path.join(output_path, spec.SPEC_FILE)
  converted = None
  if os.path.exists(spec_path):
    converted = (spec.read(spec_path), spec_path)
  features = read_features(partitions, nulls, converted)
  os.makedirs(output_path, exist_ok=True)
  spec.write(output_path, features)

  done, plans = {}, []
  for partition in partitions:
    output_dir = os.path.normpath(os.path.join(output_path, partition.name))
    if os.path.exists(os.path.join(output_dir, MARKER)):
      log(f"{partition.name or output_dir}: already converted ({MARKER} "
          "there), skipped")
      done[partition.name] = None
      continue
    _start_over(output_dir)
    plans.append((partition, output_dir,
                  _tasks(partition, features, nulls, output_dir, processes)))

  tasks = [task for _, _, plan in plans for task in plan]
  if processes == 1 or len(tasks) <= 1:
    done.update(_finish(plans, map(_run, tasks), log))
  else:
    context = multiprocessing.get_context("spawn")
    with context.Pool(min(processes, len(tasks)),
                      initializer=give_back_freed_memory) as pool:
      done.update(_finish(plans, pool.imap_unordered(_run, tasks), log))
  return done


def _finish(plans, results, log):
  """Marks each partition once all its files are in place; {name: records}."""
  started = time.monotonic()
  partition_of = {task.target: index for index, (_, _, plan) in enumerate(plans)
                  for task in plan}
  left = [len(plan) for _, _, plan in plans]
  records = [0] * len(plans)
  done = {}

  def finished(index):
    partition, output_dir, _ = plans[index]
    _mark(output_dir)
    done[partition.name] = records[index]
    log(f"{partition.name or output_dir}: {records[index]} records from "
        f"{len(partition.files)} file(s) -> {output_dir} "
        f"({time.monotonic() - started:.1f} s)")

  for index, count in enumerate(left):
    if not count:  # files without row groups
      finished(index)
  for target, count in results:
    index = partition_of[target]
    records[index] += count
    left[index] -= 1
    if not left[index]:
      finished(index)
  return done

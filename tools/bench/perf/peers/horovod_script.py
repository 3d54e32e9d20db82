"""A hand-written Horovod Estimator script of the usual shape.

The shape of Horovod's own Estimator example: `hvd.init()`, a session config
per rank, `model_dir` on rank 0 only, the optimizer wrapped in
`hvd.DistributedOptimizer`, `BroadcastGlobalVariablesHook(0)`. It is the
peer of the framework's Horovod backend (same network, optimizer, input and
thread settings, no coordination extras), and, with
`backward_passes_per_step=k`, of its accumulation: Horovod's own accumulator
reads one micro-batch per run and allreduces every k-th run.

Run it alone with `horovodrun --gloo -np 2 -H localhost:2 python -m
tools.bench.perf.peers.horovod_script`; tools/bench/perf/kinds.py calls
`train`. Horovod is imported in the functions that use it: the other kinds
import this module too, and their peak-memory rows must not carry Horovod's
library.
"""
import tempfile

import tensorflow as tf

from model_zoo import digits
from tools.bench.perf.peers import handwritten


def make_model_fn(build_network, learning_rate, backward_passes_per_step=1,
                  momentum=0.9):
  """The model_fn: a Horovod-wrapped momentum optimizer around the network."""
  import horovod.tensorflow as hvd  # pylint: disable=g-import-not-at-top
  return handwritten.make_model_fn(
      build_network, learning_rate, momentum,
      wrap=lambda optimizer: hvd.DistributedOptimizer(
          optimizer, backward_passes_per_step=backward_passes_per_step,
          average_aggregated_gradients=True))


def train(build_network, params, input_fn, model_dir, learning_rate, steps,
          backward_passes_per_step=1, threads=0, hooks=(),
          run_config_kwargs=None):
  """Trains `steps` runs on every rank; returns (rank, size).

  Args:
    build_network: params -> network(features, training) -> logits, called
      once per graph (handwritten.zoo_network).
    params: the network's hyperparameters.
    input_fn: this rank's input_fn (one micro-batch per run).
    model_dir: rank 0's checkpoint directory.
    learning_rate: the optimizer's rate.
    steps: session runs per rank.
    backward_passes_per_step: Horovod's local accumulation k.
    threads: intra- and inter-op threads per rank (0: TensorFlow's default).
    hooks: extra SessionRunHooks.
    run_config_kwargs: more RunConfig arguments (checkpoint intervals).
  """
  import horovod.tensorflow as hvd  # pylint: disable=g-import-not-at-top
  hvd.init()
  session = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads,
                                     inter_op_parallelism_threads=threads)
  config = tf.estimator.RunConfig(session_config=session,
                                  **(run_config_kwargs or {}))
  estimator = tf.estimator.Estimator(
      make_model_fn(build_network, learning_rate, backward_passes_per_step),
      model_dir=model_dir if hvd.rank() == 0 else None, config=config,
      params=params)
  estimator.train(input_fn, steps=steps,
                  hooks=[hvd.BroadcastGlobalVariablesHook(0)] + list(hooks))
  return hvd.rank(), hvd.size()


def main():
  model = digits.DigitsCNN()
  params = model.default_hparams()
  rank, size = train(handwritten.zoo_network(model), params,
                     model.input_fn(tf.estimator.ModeKeys.TRAIN, 64, params),
                     tempfile.mkdtemp(prefix="hvd-script-"), 0.05, 200)
  print(f"rank {rank} of {size}: done")


if __name__ == "__main__":
  main()

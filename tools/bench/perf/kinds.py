"""What a measurement trains: the framework, its hand-written peers, a
bare input pipeline, or a user's first training run.

worker.py imports this only once a kind that trains runs (see timing.py).
"""
import time

import tensorflow as tf

import estimator_scale as es
from estimator_scale import hparams
from estimator_scale import registry
from model_zoo import digits_data
from tools.bench.perf import timing
from tools.bench.perf import usage
from tools.bench.perf.peers import cond_apply
from tools.bench.perf.peers import handwritten
from tools.bench.perf.peers import horovod_script
from tools.bench.perf.peers import plain_pipeline

# No checkpoint, summary or step-log writes inside the timed window, for
# every variant alike: the benchmark measures training, not disk writes.
QUIET = dict(save_checkpoints_steps=10**9, save_summary_steps=10**9,
             log_step_count_steps=10**9)


def load_model(name):
  """The registered model `name` (the zoo's or the bench's own) and its
  default hparams."""
  registry.load_module("model_zoo")
  registry.load_module("tools.bench.perf.sparse_model")
  registry.load_module("tools.bench.perf.wide_mlp")
  model = registry.get(name)
  return model, hparams.parse(model.default_hparams())


def _session_config(threads):
  return tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads,
                                  inter_op_parallelism_threads=threads,
                                  allow_soft_placement=True)


def _model_input_fn(model, params, batch, accumulation_steps=1):
  return model.input_fn(tf.estimator.ModeKeys.TRAIN, batch, params, None,
                        accumulation_steps)


def run_ours(args, hook):
  """The framework, through its public API only; returns (rank, workers)."""
  model, _ = load_model(args.model)
  scale_config = es.build_run_config(
      args.distribution, model_dir=args.model_dir, random_seed=0,
      intra_op_threads=args.threads or None, **QUIET)
  k = args.accumulation_steps
  config = es.TrainingConfig(
      optimizer="momentum", accumulation_steps=k, lr_scaling=args.lr_scaling,
      learning_rate=args.learning_rate,
      precision=args.precision,
      allreduce_compression=args.allreduce_compression)
  estimator = es.make_estimator(model, scale_config=scale_config,
                                training_config=config)
  workers = estimator.topology.num_workers
  input_fn = estimator.model_input_fn(tf.estimator.ModeKeys.TRAIN,
                                      args.batch * workers)
  estimator.train(input_fn, hooks=[hook], max_steps=args.warmup + args.steps)
  return estimator.topology.worker_index, workers


def run_hand(args, hook, accumulate=False):
  """The hand-written model_fn, or the conditional-apply accumulator."""
  model, params = load_model(args.model)
  network = handwritten.zoo_network(model)
  if accumulate:
    model_fn = cond_apply.make_model_fn(network, args.learning_rate,
                                        args.accumulation_steps)
  else:
    model_fn = handwritten.make_model_fn(network, args.learning_rate)
  session = _session_config(args.threads) if args.threads else None
  config = tf.estimator.RunConfig(model_dir=args.model_dir, tf_random_seed=0,
                                  session_config=session, **QUIET)
  estimator = tf.estimator.Estimator(model_fn, config=config, params=params)
  # max_steps as users pass it (and as ours gets it): global_step counts
  # updates, one per k runs for the accumulator.
  runs = args.warmup + args.steps
  updates = runs // args.accumulation_steps if accumulate else runs
  estimator.train(_model_input_fn(model, params, args.batch), hooks=[hook],
                  max_steps=updates)
  return 0, 1


def run_cond_apply(args, hook):
  """run_hand's conditional-apply accumulator."""
  return run_hand(args, hook, accumulate=True)


def run_horovod_script(args, hook):
  """Horovod's own example shape, as users write it."""
  model, params = load_model(args.model)
  return horovod_script.train(
      handwritten.zoo_network(model), params,
      _model_input_fn(model, params, args.batch),
      args.model_dir, args.learning_rate, args.warmup + args.steps,
      backward_passes_per_step=args.accumulation_steps, threads=args.threads,
      hooks=[hook], run_config_kwargs=dict(tf_random_seed=0, **QUIET))


TRAINERS = {"ours": run_ours, "hand": run_hand, "cond_apply": run_cond_apply,
            "horovod_script": run_horovod_script}


def time_pipeline(args):
  """Pulls batches through a session as Estimator does, minus the model.

  Returns:
    (examples, seconds, CPU seconds) of the timed batches.
  """
  with tf.Graph().as_default():
    if args.kind == "pipeline_ours":
      input_fn = digits_data.input_fn(tf.estimator.ModeKeys.TRAIN, args.batch,
                                      None, 1)
    else:
      input_fn = plain_pipeline.make_input_fn(
          digits_data.tfrecord_pattern("train"), digits_data.FEATURE_SPEC,
          "label", args.batch)
    batch = tf.compat.v1.data.make_one_shot_iterator(input_fn()).get_next()
    pull = tf.group(tf.nest.flatten(batch))
    session = _session_config(args.threads) if args.threads else None
    with tf.compat.v1.Session(config=session) as sess:
      for _ in range(args.warmup):
        sess.run(pull)
      start, cpu = time.perf_counter(), usage.cpu_seconds()
      for _ in range(args.steps):
        sess.run(pull)
      seconds = time.perf_counter() - start
      cpu = usage.cpu_seconds() - cpu
  return args.batch * args.steps, seconds, cpu


def train_startup_child(args):
  """A user's first training run, public API only: --steps updates, no eval.

  Everything but k and the batch is left at its default, so the runs a row
  compares differ in nothing else.

  Returns:
    The run's milestones: when its session was ready, when each run ended.
  """
  registry.load_module("model_zoo")
  estimator = es.make_estimator(
      registry.get(args.model), model_dir=args.model_dir,
      training_config=es.TrainingConfig(
          accumulation_steps=args.accumulation_steps))
  hook = timing.MilestoneHook()
  estimator.train(estimator.model_input_fn(tf.estimator.ModeKeys.TRAIN,
                                           args.batch),
                  hooks=[hook], max_steps=args.steps)
  return {"ready": hook.ready, "run_ends": hook.run_ends}

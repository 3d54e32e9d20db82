"""One benchmark measurement in a fresh process: build, warm up, time, report.

runner.py starts this once per variant and round (under horovodrun or
estimator-scale-launch for multi-process variants) so that every measurement
has its own graph, its own session and its own peak-memory figure. Only the wall
time between the end of warm-up run `--warmup` and the end of run
`--warmup + --steps` counts: graph building, session creation, variable
broadcast and the first runs are excluded alike for every variant.

`--kind=startup` instead times a fresh training process from outside,
start to exit (`time_startup`), for the costs that window leaves out: graph
building, session creation and the first update. That process is this
script again as `--kind=startup_child`, which writes only its milestones.

Each process writes `<--out>.<rank>.json`: examples, seconds, peak RSS.
It runs as a script, and imports at its top only what every kind needs: the
startup kinds time this very process's start.
"""
import argparse
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

KINDS = ("ours", "hand", "cond_apply", "horovod_script", "pipeline_ours",
         "pipeline_plain", "startup", "startup_child")
# No checkpoint, summary or step-log writes inside the timed window, for
# every variant alike: the benchmark measures training, not disk writes.
QUIET = dict(save_checkpoints_steps=10**9, save_summary_steps=10**9,
             log_step_count_steps=10**9)


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--kind", choices=KINDS, required=True)
  parser.add_argument("--model", default="digits_cnn")
  parser.add_argument("--batch", type=int, required=True,
                      help="examples one process reads per session run "
                      "(startup: per update, k micro-batches)")
  parser.add_argument("--accumulation_steps", type=int, default=1)
  parser.add_argument("--distribution", default="none")
  parser.add_argument("--lr_scaling", default="identity")
  parser.add_argument("--learning_rate", type=float, default=0.01)
  parser.add_argument("--precision", default="float32")
  parser.add_argument("--allreduce_compression", default="none")
  parser.add_argument("--threads", type=int, default=0,
                      help="intra- and inter-op threads (0: TF's default)")
  parser.add_argument("--warmup", type=int, default=5)
  parser.add_argument("--steps", type=int, default=20,
                      help="timed runs (startup: updates from step 0)")
  parser.add_argument("--windows", default="",
                      help="timed runs per window, comma-separated, paused "
                           "between windows (tools/bench/windows.py); "
                           "replaces --steps")
  parser.add_argument("--rewarm", type=int, default=2,
                      help="untimed runs before each window after the first")
  parser.add_argument("--pause_dir", default=None,
                      help="--windows: where the pauses' handshake files go")
  parser.add_argument("--model_dir", default=None)
  parser.add_argument("--out", required=True)
  return parser.parse_args(argv)


def peak_rss_mib(who=resource.RUSAGE_SELF):
  """This process's (or its children's) peak resident set size, in MiB.

  Linux reports KiB. For RUSAGE_CHILDREN it is the largest over every child
  waited for, not a sum.
  """
  return resource.getrusage(who).ru_maxrss / 1024.0


def restart_peak_rss():
  """Starts a new peak-RSS window for this process.

  Linux resets a process's high-water mark (VmHWM, and ru_maxrss with it)
  when "5" is written to /proc/self/clear_refs, so the peak read at the end
  of the timed window is the window's own: what training holds, without
  the variables' initialisation or the final checkpoint's save, which can
  exceed it.

  Returns:
    (the peak so far, whether the kernel restarted it).
  """
  peak = peak_rss_mib()
  try:
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
      f.write("5")
  except OSError:
    return peak, False
  return peak, True


def cpu_seconds(who=resource.RUSAGE_SELF):
  """CPU time of all this process's threads, to show how many cores it used."""
  usage = resource.getrusage(who)
  return usage.ru_utime + usage.ru_stime


class TimingHook:
  """Times runs warmup+1 .. warmup+steps, then stops training.

  Also records the peak RSS before the window (`peak_before`) and within it
  (`window_peak`, None where the kernel cannot restart the peak).

  Built lazily as a SessionRunHook subclass so that importing this module
  (tests, --help) does not import TensorFlow.
  """

  def __new__(cls, warmup, steps):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    class _Hook(tf.compat.v1.train.SessionRunHook):

      def __init__(self):
        self.runs, self.started, self.ended = 0, None, None
        self.cpu = None
        self.peak_before, self.window_peak, self._restarted = 0.0, None, False

      def after_run(self, run_context, run_values):
        self.runs += 1
        if self.runs == warmup:
          self.peak_before, self._restarted = restart_peak_rss()
          self.started = time.perf_counter()
          self.cpu = cpu_seconds()
        elif self.runs == warmup + steps:
          self.ended = time.perf_counter()
          self.cpu = cpu_seconds() - self.cpu
          if self._restarted:
            self.window_peak = peak_rss_mib()
          run_context.request_stop()

    return _Hook()


def _session_config(threads):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads,
                                  inter_op_parallelism_threads=threads,
                                  allow_soft_placement=True)


def _model(args):
  from estimator_scale import registry  # pylint: disable=g-import-not-at-top
  from estimator_scale import hparams  # pylint: disable=g-import-not-at-top
  registry.load_module("model_zoo")
  registry.load_module("tools.bench.sparse_model")
  registry.load_module("tools.bench.wide_mlp")
  model = registry.get(args.model)
  return model, hparams.parse(model.default_hparams())


def _model_input_fn(model, params, batch, accumulation_steps=1):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return model.input_fn(tf.estimator.ModeKeys.TRAIN, batch, params, None,
                        accumulation_steps)


def run_ours(args, hook):
  """The framework, through its public API only; returns (rank, workers)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import estimator_scale as es  # pylint: disable=g-import-not-at-top
  model, _ = _model(args)
  scale = es.build_run_config(args.distribution, model_dir=args.model_dir,
                              random_seed=0,
                              intra_op_threads=args.threads or None, **QUIET)
  k = args.accumulation_steps
  config = es.TrainingConfig(
      optimizer="momentum", accumulation_steps=k, lr_scaling=args.lr_scaling,
      schedule=es.Schedule(learning_rate=args.learning_rate),
      precision=args.precision,
      allreduce_compression=args.allreduce_compression)
  estimator = es.make_estimator(model, scale_config=scale,
                                training_config=config)
  workers = estimator.topology.num_workers
  input_fn = estimator.model_input_fn(tf.estimator.ModeKeys.TRAIN,
                                      args.batch * workers)
  estimator.train(input_fn, hooks=[hook], max_steps=args.warmup + args.steps)
  return estimator.topology.worker_index, workers


def run_hand(args, hook, accumulate=False):
  """The hand-written model_fn, or the conditional-apply accumulator."""
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  from tools.bench.peers import cond_apply
  from tools.bench.peers import handwritten
  model, params = _model(args)
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


def run_horovod_script(args, hook):
  # pylint: disable=g-import-not-at-top
  from tools.bench.peers import handwritten
  from tools.bench.peers import horovod_script
  model, params = _model(args)
  return horovod_script.train(
      handwritten.zoo_network(model), params,
      _model_input_fn(model, params, args.batch),
      args.model_dir, args.learning_rate, args.warmup + args.steps,
      backward_passes_per_step=args.accumulation_steps, threads=args.threads,
      hooks=[hook], run_config_kwargs=dict(tf_random_seed=0, **QUIET))


def time_pipeline(args):
  """Pulls batches through a session as Estimator does, minus the model.

  Returns:
    (examples, seconds, CPU seconds) of the timed batches.
  """
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  from model_zoo import digits_data
  from tools.bench.peers import plain_pipeline
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
      start, cpu = time.perf_counter(), cpu_seconds()
      for _ in range(args.steps):
        sess.run(pull)
      seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
  return args.batch * args.steps, seconds, cpu


class MilestoneHook:
  """Records when the session is ready and when each run ends.

  Readings of time.time(), not perf_counter: the wrapper subtracts its own
  reading from just before it started this process, and only the wall
  clock is defined alike in two processes. Built lazily, like TimingHook.
  """

  def __new__(cls):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    class _Hook(tf.compat.v1.train.SessionRunHook):

      def __init__(self):
        self.ready, self.run_ends = None, []

      def after_create_session(self, session, coord):
        self.ready = time.time()

      def after_run(self, run_context, run_values):
        self.run_ends.append(time.time())

    return _Hook()


def train_startup_child(args):
  """A user's first training run, public API only: --steps updates, no eval.

  Everything but k and the batch is left at its default, so the runs a row
  compares differ in nothing else. Writes its milestones to
  `<--out>.milestones` for the wrapper (not `.json`: those are results).
  """
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  import estimator_scale as es
  from estimator_scale import registry
  registry.load_module("model_zoo")
  estimator = es.make_estimator(
      registry.get(args.model), model_dir=args.model_dir,
      training_config=es.TrainingConfig(
          accumulation_steps=args.accumulation_steps))
  hook = MilestoneHook()
  estimator.train(estimator.model_input_fn(tf.estimator.ModeKeys.TRAIN,
                                           args.batch),
                  hooks=[hook], max_steps=args.steps)
  with open(f"{args.out}.milestones", "w", encoding="utf-8") as f:
    json.dump({"ready": hook.ready, "run_ends": hook.run_ends}, f)


def startup_child_argv(args):
  """The process `--kind=startup` times: its own flags, as startup_child."""
  return [sys.executable, os.path.abspath(__file__), "--kind=startup_child",
          f"--model={args.model}", f"--batch={args.batch}",
          f"--accumulation_steps={args.accumulation_steps}",
          f"--steps={args.steps}", f"--model_dir={args.model_dir}",
          f"--out={args.out}"]


# The fields startup_fields adds, which combine() passes on.
STARTUP_FIELDS = ("session_seconds", "update_examples_per_sec")


def startup_fields(start, milestones, batch):
  """What a startup run adds to the result, from the child's milestones.

  session_seconds: from `start` (taken just before the child started) to
  its session being ready: interpreter and TensorFlow start, graph build,
  session creation, variable initialization, checkpoint 0; no update yet.
  update_examples_per_sec: over the updates after the first, the speed of
  the compute the whole-process time also contains.
  """
  ends = milestones["run_ends"]
  return {"session_seconds": milestones["ready"] - start,
          "update_examples_per_sec":
              batch * (len(ends) - 1) / (ends[-1] - ends[0])}


def time_startup(args):
  """A fresh training process, timed from outside, start to exit.

  The child is this process's only child, so RUSAGE_CHILDREN is that one
  process's own usage; that is why each such measurement runs in a wrapper
  of its own (ru_maxrss of RUSAGE_CHILDREN is the largest over every child
  ever waited for). The wrapper imports no TensorFlow: a child's peak also
  counts the wrapper's pages it maps until exec, a floor far below the
  child's own peak.
  """
  if args.steps < 2:
    raise ValueError("--steps must be >= 2: the rate is taken after update 1")
  child = startup_child_argv(args)
  start = time.time()
  subprocess.run(child, cwd=ROOT, check=True)
  seconds = time.time() - start
  milestones = json.loads(
      pathlib.Path(f"{args.out}.milestones").read_text(encoding="utf-8"))
  result = _result(0, args.batch * args.steps, seconds,
                   cpu_seconds(resource.RUSAGE_CHILDREN),
                   peak_rss_mib(resource.RUSAGE_CHILDREN))
  result.update(startup_fields(start, milestones, args.batch))
  return result


def measure(args):
  """Runs the variant; returns this process's result dict."""
  # pylint: disable=g-import-not-at-top
  from tools.bench import windows
  args.model_dir = args.model_dir or tempfile.mkdtemp(prefix="bench-model-")
  if args.kind == "startup":
    return time_startup(args)
  window_peak, peak_before = None, 0.0
  if args.kind.startswith("pipeline"):
    examples, seconds, cpu = time_pipeline(args)
    rank = 0
  else:
    if args.warmup < 1:
      raise ValueError("--warmup must be >= 1: run 1 builds lazily")
    steps = [args.steps]
    if args.windows:  # the first window's figures are the result's own
      steps = [int(s) for s in args.windows.split(",")]
      hook = windows.WindowsHook(args.warmup, steps, args.rewarm,
                                 args.pause_dir)
      args.steps = windows.total_runs(args.warmup, steps,
                                      args.rewarm) - args.warmup
    else:
      hook = TimingHook(args.warmup, args.steps)
    runner = {"ours": run_ours, "hand": run_hand,
              "cond_apply": lambda a, h: run_hand(a, h, accumulate=True),
              "horovod_script": run_horovod_script}[args.kind]
    rank, _ = runner(args, hook)
    if hook.ended is None or len(getattr(hook, "windows", steps)) < len(steps):
      raise RuntimeError(f"training stopped after {hook.runs} runs, before "
                         f"{args.warmup + args.steps}")
    examples, seconds, cpu = (args.batch * steps[0],
                              hook.ended - hook.started, hook.cpu)
    window_peak, peak_before = hook.window_peak, hook.peak_before
  result = _result(rank, examples, seconds, cpu,
                   max(peak_before, peak_rss_mib()), window_peak)
  if args.windows:
    result["windows"] = [{"examples": args.batch * runs, "seconds": seconds}
                         for runs, seconds in hook.windows]
  return result


def _result(rank, examples, seconds, cpu, peak_mib, window_peak_mib=None):
  """The result dict every kind writes, so runner.py reads one shape."""
  return {"rank": rank, "examples": examples, "seconds": seconds,
          "examples_per_sec": examples / seconds, "cores_used": cpu / seconds,
          "peak_rss_mib": peak_mib, "window_peak_rss_mib": window_peak_mib}


def pin_threads(threads):
  """Gives this process `threads` intra- and inter-op threads (0: defaults).

  Call it first: TensorFlow fixes its process-wide intra-op pool when the
  eager context starts, which Estimator.train does before it reads any
  session config. The framework's own `backends.base.pin_threads` sizes
  that pool, as `intra_op_threads` does in our runs, so every side of a
  pinned row is pinned by the same code. The framework leaves the inter-op
  pool alone; TensorFlow takes its size from TF_NUM_INTEROP_THREADS for
  every session whose config leaves it at 0 (Estimator's default config).
  With `threads` 0 nothing is imported: the startup wrapper runs no
  TensorFlow.
  """
  if not threads:
    return
  os.environ["TF_NUM_INTEROP_THREADS"] = str(threads)
  from estimator_scale.backends import base  # pylint: disable=g-import-not-at-top
  base.pin_threads(threads, requested=True)


def main(argv=None):
  args = parse_args(sys.argv[1:] if argv is None else argv)
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  pin_threads(args.threads)
  if args.kind == "startup_child":
    train_startup_child(args)  # its wrapper writes the result
    return
  result = measure(args)
  with open(f"{args.out}.{result['rank']}.json", "w", encoding="utf-8") as f:
    json.dump(result, f)


if __name__ == "__main__":
  main()

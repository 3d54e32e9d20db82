"""One benchmark measurement in a fresh process: build, warm up, time, report.

tools/bench.py starts this once per variant and repeat (under horovodrun or
tools/launch.py for multi-process variants) so that every measurement has
its own graph, its own session and its own peak-memory figure. Only the wall
time between the end of warm-up run `--warmup` and the end of run
`--warmup + --steps` counts: graph building, session creation, variable
broadcast and the first runs are excluded alike for every variant.

`--kind=startup` instead times a fresh training process from outside,
start to exit (`time_startup`), for the costs that window leaves out: graph
building, session creation and the first update. That process is this
script again as `--kind=startup_child`, which writes only its milestones.

Each process writes `<--out>.<rank>.json`: examples, seconds, peak RSS.
`run_measurement` is the launching side that tools/bench.py calls.
"""
import argparse
import glob
import json
import os
import pathlib
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
  parser.add_argument("--model_dir", default=None)
  parser.add_argument("--out", required=True)
  return parser.parse_args(argv)


def peak_rss_mib(who=resource.RUSAGE_SELF):
  """This process's (or its children's) peak resident set size, in MiB.

  Linux reports KiB. For RUSAGE_CHILDREN it is the largest over every child
  waited for, not a sum.
  """
  return resource.getrusage(who).ru_maxrss / 1024.0


def cpu_seconds(who=resource.RUSAGE_SELF):
  """CPU time of all this process's threads, to show how many cores it used."""
  usage = resource.getrusage(who)
  return usage.ru_utime + usage.ru_stime


class TimingHook:
  """Times runs warmup+1 .. warmup+steps, then stops training.

  Built lazily as a SessionRunHook subclass so that importing this module
  (tests, --help) does not import TensorFlow.
  """

  def __new__(cls, warmup, steps):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    class _Hook(tf.compat.v1.train.SessionRunHook):

      def __init__(self):
        self.runs, self.started, self.ended = 0, None, None
        self.cpu = None

      def after_run(self, run_context, run_values):
        self.runs += 1
        if self.runs == warmup:
          self.started = time.perf_counter()
          self.cpu = cpu_seconds()
        elif self.runs == warmup + steps:
          self.ended = time.perf_counter()
          self.cpu = cpu_seconds() - self.cpu
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
  from tools.bench_peers import cond_apply
  from tools.bench_peers import handwritten
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
  from tools.bench_peers import handwritten
  from tools.bench_peers import horovod_script
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
  from tools.bench_peers import plain_pipeline
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
  args.model_dir = args.model_dir or tempfile.mkdtemp(prefix="bench-model-")
  if args.kind == "startup":
    return time_startup(args)
  if args.kind.startswith("pipeline"):
    examples, seconds, cpu = time_pipeline(args)
    rank = 0
  else:
    if args.warmup < 1:
      raise ValueError("--warmup must be >= 1: run 1 builds lazily")
    hook = TimingHook(args.warmup, args.steps)
    runner = {"ours": run_ours, "hand": run_hand,
              "cond_apply": lambda a, h: run_hand(a, h, accumulate=True),
              "horovod_script": run_horovod_script}[args.kind]
    rank, _ = runner(args, hook)
    if hook.ended is None:
      raise RuntimeError(f"training stopped after {hook.runs} runs, before "
                         f"{args.warmup + args.steps}")
    examples, seconds, cpu = (args.batch * args.steps,
                              hook.ended - hook.started, hook.cpu)
  return _result(rank, examples, seconds, cpu, peak_rss_mib())


def _result(rank, examples, seconds, cpu, peak_mib):
  """The result dict every kind writes, so tools/bench.py reads one shape."""
  return {"rank": rank, "examples": examples, "seconds": seconds,
          "examples_per_sec": examples / seconds, "cores_used": cpu / seconds,
          "peak_rss_mib": peak_mib}


def pin_threads(threads):
  """Pins TensorFlow's process-wide thread pools; call before importing it.

  A session config alone does not pin on TF 2.15: Estimator.train builds a
  tf.cond (the global-step read), which starts the eager context, and that
  creates the process's CPU thread pool at its default size before any
  session config is read. The environment is read at that moment.
  """
  if threads:
    os.environ["TF_NUM_INTRAOP_THREADS"] = str(threads)
    os.environ["TF_NUM_INTEROP_THREADS"] = str(threads)


# The launching side: what tools/bench.py calls to run one measurement.

# Seconds before a measurement is stopped (its whole process group) and
# recorded as failed.
DEFAULT_TIMEOUT_S = 150


def command(spec, out, model_dir, scale=1.0, launch_timeout=130):
  """The argv that measures a variant, its timed steps multiplied by `scale`.

  Args:
    spec: (launcher: python | horovodrun | launch, processes, worker flags).
    out: result path prefix; each process adds `.<rank>.json`.
    model_dir: the (shared) checkpoint directory.
    scale: multiplies the timed steps (and warm-up, when below 1/4) of
      every kind but startup.
    launch_timeout: tools/launch.py's own limit, so it stops its workers.
  """
  launcher, processes, flags = spec
  flags = dict(flags)
  if flags["kind"] != "startup":  # startup trains the updates its rows name
    flags["steps"] = max(1, int(flags["steps"] * scale))
    flags["warmup"] = max(1, int(flags["warmup"] * min(1.0, scale * 4)))
  worker = [sys.executable, os.path.abspath(__file__), f"--out={out}",
            f"--model_dir={model_dir}"]
  worker += [f"--{k}={v}" for k, v in sorted(flags.items())]
  if launcher == "horovodrun":
    horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    return [horovodrun, "--gloo", "-np", str(processes), "-H",
            f"localhost:{processes}"] + worker
  if launcher == "launch":
    return [sys.executable, os.path.join(ROOT, "tools", "launch.py"),
            f"--workers={processes}",
            f"--timeout={launch_timeout}", "--"] + worker
  return worker


def combine(results):
  """One measurement from its processes' results: the job's examples/sec.

  Synchronous processes finish together, so the job's time is the slowest
  one's and its rate all their examples over that time; memory is the
  largest process's.
  """
  seconds = max(r["seconds"] for r in results)
  combined = {
      "examples_per_sec": sum(r["examples"] for r in results) / seconds,
      "seconds": seconds,
      "peak_rss_mib": max(r["peak_rss_mib"] for r in results),
      "cores_used": statistics.mean(r["cores_used"] for r in results),
      "processes": len(results)}
  # A startup run's own fields (startup_fields); that kind is one process.
  combined.update((k, v) for k, v in results[0].items()
                  if k in STARTUP_FIELDS)
  return combined


def _run(argv, env, log_path, timeout):
  """Runs argv in its own process group; on timeout stops the whole group."""
  with open(log_path, "w", encoding="utf-8") as log:
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
      return proc.wait(timeout)
    except subprocess.TimeoutExpired:
      for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, None)):
        try:
          os.killpg(proc.pid, sig)
          proc.wait(wait)
          break
        except (ProcessLookupError, subprocess.TimeoutExpired):
          pass
      return "timeout"


def run_measurement(variant, spec, log_dir, scale=1.0,
                    timeout=DEFAULT_TIMEOUT_S):
  """Runs one measurement of `spec`; returns combine(...) or None on failure.

  Its log (and, briefly, its model_dir) live in a new folder of `log_dir`.
  """
  scratch = tempfile.mkdtemp(prefix=f"{variant}-", dir=log_dir)
  out = os.path.join(scratch, "result")
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  for name in ("TF_CONFIG", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
    env.pop(name, None)  # only --threads may pin a variant
  argv = command(spec, out, os.path.join(scratch, "model"), scale,
                 launch_timeout=timeout - 20)
  code = _run(argv, env, os.path.join(scratch, "log.txt"), timeout)
  results = [json.loads(pathlib.Path(p).read_text(encoding="utf-8"))
             for p in sorted(glob.glob(out + ".*.json"))]
  shutil.rmtree(os.path.join(scratch, "model"), ignore_errors=True)
  if code != 0 or len(results) != spec[1]:
    print(f"  {variant}: FAILED ({code}); see {scratch}/log.txt", flush=True)
    return None
  return combine(results)


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

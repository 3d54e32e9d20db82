"""Commands the tests start: the venv's Python, horovodrun and the launcher.

Every command runs from the repository root with TensorFlow's C++ logging
quiet and without the caller's TF_CONFIG, so a test's workers see only the
cluster the test gives them.
"""
import functools
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
PYTHON = sys.executable
HOROVODRUN = os.path.join(os.path.dirname(sys.executable), "horovodrun")
CLI = [PYTHON, "-m", "estimator_scale.cli"]

KERAS_ADASCALE = ["--model=digits_mlp", "--accumulation_steps=4",
                  "--lr_scaling=adascale", "--learning_rate=0.02"]
"""digits_mlp (Keras layers made in logits), 4 micro-batches, AdaScale."""

RESUME_ADASCALE = ["--lr_scaling=adascale", "--accumulation_steps=2"]
"""What a resumed run adds to one that had no AdaScale state to save."""


def worker_env():
  """This process's environment for a worker: the repo importable, no
  TF_CONFIG inherited from whoever ran pytest."""
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  env.pop("TF_CONFIG", None)
  return env


def run(command, timeout=240, check=True, env=None):
  """Runs a command from the repo root; returns the CompletedProcess.

  With `check`, a non-zero exit fails the test with the end of the
  command's output, which is where its error is.
  """
  proc = subprocess.run(command, cwd=ROOT, env=env or worker_env(),
                        capture_output=True, text=True, timeout=timeout)
  if check and proc.returncode != 0:
    raise AssertionError(f"{command} exited {proc.returncode}:\n"
                         f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
  return proc


@functools.lru_cache(maxsize=None)
def _gloo_built():
  """horovodrun's own answer to whether Horovod has Gloo, asked once per
  pytest process: horovodrun asks it in a child that imports TensorFlow
  (seconds of every job's start, most of a short job's)."""
  proc = run([PYTHON, "-c", "from horovod.common import util; "
              "print(bool(util.gloo_built()))"])
  return proc.stdout.split()[-1] == "True"


# horovodrun (its console script) with this process's answer to its check.
_HOROVODRUN_CODE = """import sys
from horovod.runner import launch
launch.gloo_built = lambda verbose=False: {gloo}
sys.argv[0] = "horovodrun"
sys.exit(launch.run_commandline())
"""


def horovodrun():
  """The command of `horovodrun` (HOROVODRUN) before its arguments:
  Horovod's own launcher, told the answer of its Gloo check."""
  return [PYTHON, "-c", _HOROVODRUN_CODE.format(gloo=_gloo_built())]


def horovodrun_argv(np_, args):
  """`horovodrun` of `np_` local ranks running this Python with `args`."""
  return horovodrun() + ["--gloo", "-np", str(np_), "-H", f"localhost:{np_}",
                         PYTHON] + args


def horovod(np_, args, **kwargs):
  """Runs `args` as `np_` Horovod ranks on this host; see `run`."""
  return run(horovodrun_argv(np_, args), **kwargs)


def launch_argv(workers, args, ps=0):
  """The launcher starting `workers` TF_CONFIG workers (and `ps` parameter
  servers) on this host, each running this Python with `args`."""
  servers = ["--ps", str(ps)] if ps else []
  return [PYTHON, "-m", "estimator_scale.launcher", "--workers", str(workers),
          *servers, "--", PYTHON] + args


def launch(workers, args, ps=0, **kwargs):
  """Runs `args` as `workers` TF_CONFIG workers (and `ps` parameter servers)
  on this host; see `run`."""
  return run(launch_argv(workers, args, ps), **kwargs)


def dump_args(out, model_dir=None, **flags):
  """Arguments of tests.workers.dump_run, which writes each worker's
  variables and results under `out`; `flags` become its --flags."""
  args = ["-m", "tests.workers.dump_run", f"--out_dir={out}"]
  if model_dir:
    args.append(f"--model_dir={model_dir}")
  return args + [f"--{k}={v}" for k, v in flags.items()]


def alive(pid):
  """Whether `pid` runs (a zombie, waiting for its reaper, does not)."""
  try:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
      return f.read().rsplit(")", 1)[1].split()[0] != "Z"
  except (FileNotFoundError, ProcessLookupError):  # gone meanwhile
    return False

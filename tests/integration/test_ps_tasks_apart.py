"""A parameter-server job's worker may open its session after the chief ended.

Each task's sessions open on the ps tasks' devices and its own only: a
session opened on every task's waits for all of them to answer, so a
worker that opens its training session once the chief has trained,
evaluated, exported and exited (Estimator holds a worker back seconds
before its first session; a large graph takes longer to build than a short
run) would wait for ever, and the launcher with it. Here the worker
decides to train while the chief runs, but opens its session only once the
chief's process has ended: it must find the training done, evaluate the
chief's checkpoint and exit 0.
"""
import json
import os

from tests.helpers.processes import launch

TASK = """
import json, os, runpy, sys, time
import tensorflow as tf
from tensorflow.python.training import training
from estimator_scale.backends import cluster_exit
config = json.loads(os.environ["TF_CONFIG"])
task = config["task"]["type"]
chief = config["cluster"]["chief"][0]
done = sys.argv[1]


def wait(until, what):
    deadline = time.time() + 300
    while not until():
        if time.time() > deadline:
            sys.exit(f"{task}: {what} not within 300 s")
        time.sleep(0.2)


session = training.MonitoredTrainingSession
decided = done + ".worker_trains"
if task == "chief":
    def after_the_worker_decided(*args, **kwargs):
        wait(lambda: os.path.exists(decided), "the worker's decision")
        return session(*args, **kwargs)
    training.MonitoredTrainingSession = after_the_worker_decided
elif task == "worker":
    # Past Estimator's check of the checkpoint's step (none yet at step 4):
    # the worker builds its training graph.
    estimator = tf.estimator.Estimator
    create = estimator._create_and_assert_global_step

    def building(self, graph):
        open(decided, "w").close()
        return create(self, graph)
    estimator._create_and_assert_global_step = building

    def after_the_chief(*args, **kwargs):
        wait(lambda: os.path.exists(done), "the chief's end")
        if cluster_exit.wait_until_gone([chief], timeout=300):
            sys.exit("worker: the chief's server still answers after 300 s")
        return session(*args, **kwargs)
    training.MonitoredTrainingSession = after_the_chief
sys.argv = sys.argv[2:]
try:
    runpy.run_module("estimator_scale.cli", run_name="__main__",
                     alter_sys=True)
finally:
    if task == "chief":
        open(done, "w").close()
"""


def test_a_worker_whose_session_opens_after_the_chief_ended_ends(tmp_path):
  model_dir = tmp_path / "model"
  args = ["-c", TASK, str(tmp_path / "chief_done"), "estimator_scale.cli",
          "train", "--model_module=tools.bench.ps_memory.model",
          "--model=one_table", "--distribution=parameter_server",
          "--hparams=rows=1024,dim=4", "--train_steps=4",
          "--global_batch_size=16", "--eval_steps=1",
          f"--model_dir={model_dir}", f"--export_dir={tmp_path / 'export'}",
          f"--summary_json={model_dir}/summary.json"]
  # The launcher exits 0 once the chief and the worker have both exited 0.
  proc = launch(1, args, ps=1, timeout=300)
  summary = json.loads((model_dir / "summary.json").read_text())
  assert summary["global_step"] == 4, (summary, proc.stdout[-3000:])
  assert os.listdir(tmp_path / "export"), proc.stdout[-3000:]

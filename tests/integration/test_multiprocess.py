"""Real multi-process runs: Horovod ranks (horovodrun) and TF_CONFIG workers.

Every test here starts several processes; each worker dumps the variables it
holds in its own session, so "the same result" is checked on every worker.
"""
import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest

from tests.helpers import golden
from tests.helpers import shared
from tests.helpers import waiting
from tests.helpers.processes import (KERAS_ADASCALE, PYTHON, ROOT, dump_args,
                                     horovod, horovodrun_argv, launch,
                                     launch_argv, run, worker_env)
from tests.helpers.results import (load_results, load_workers, max_difference,
                                   trained_variables)

TOLERANCE = 1e-5


# A reference job trains a few dozen tiny runs in one process: minutes on a
# loaded machine, where one run takes seconds.
REFERENCE_TIMEOUT_S = 900


def _run_mode(mode, out, model_dir, **flags):
  timeout = REFERENCE_TIMEOUT_S
  if mode == "horovod":
    return horovod(2, dump_args(out, model_dir, distribution="horovod",
                                **flags), timeout=timeout)
  if mode == "multi_worker_mirrored":
    return launch(2, dump_args(out, model_dir,
                               distribution="multi_worker_mirrored", **flags),
                  timeout=timeout)
  if mode == "mirrored":
    return run([PYTHON] + dump_args(out, model_dir, distribution="mirrored",
                                    **flags), timeout=timeout)
  return run([PYTHON] + dump_args(out, model_dir, **flags), timeout=timeout)


def _assert_workers_identical(workers):
  first = trained_variables(workers[0])
  for other in workers[1:]:
    assert max_difference(first, trained_variables(other)) <= TOLERANCE
  for worker in workers:  # every replica copy inside a worker, too
    for key, value in worker.items():
      if key.startswith("model/") and not key.endswith("@0"):
        twin = worker[key.rsplit("@", 1)[0] + "@0"]
        assert np.max(np.abs(value - twin)) <= TOLERANCE, key


BACKEND_RUNS = {
    "backends": dict(case="mlp", examples=64, global_batch_size=8, steps=20,
                     optimizer="sgd"),
    "train_evaluate": dict(case="mlp", global_batch_size=8, steps=10,
                           rounds=2, evaluate=True),
    "sparse_adascale": dict(case="embedding", global_batch_size=8,
                            accumulation_steps=2, steps=5,
                            optimizer="momentum", lr_scaling="adascale"),
}
"""Runs of several tests below, by name: one job per backend trains them."""

GAINS_FLAGS = dict(steps=1, optimizer="sgd", lr_scaling="adascale")
GAINS_RUNS = [dict(GAINS_FLAGS, case="sum_linear", inputs=json.dumps(rows),
                   global_batch_size=2) for rows, _, _ in golden.GAINS] + [
                       # 2 workers x 2 micro-batches of one row of eye(4).
                       dict(GAINS_FLAGS, case="sum_linear_nobias",
                            inputs=json.dumps(np.eye(4).tolist()),
                            global_batch_size=4, accumulation_steps=2)]
"""golden.GAINS on every mode, then (horovod and multi_worker_mirrored) 2
workers x 2 micro-batches."""

ACCUMULATION_CASES = [("sgd", "mlp"), ("momentum", "mlp"), ("adam", "mlp"),
                      ("momentum", "embedding")]
ACCUMULATION_FLAGS = dict(examples=128, global_batch_size=32, steps=20,
                          learning_rate=0.05)

MICRO_BATCH_CASES = ["keras", "keras_model", "mlp", "autoencoder", "embedding"]
MICRO_BATCH_FLAGS = dict(examples=64, global_batch_size=16, steps=10,
                         optimizer="momentum", learning_rate=0.05,
                         lr_scaling="adascale", batch_scale=1.0)
MICRO_BATCH_K = 4

COWCLIP = dict(case="embedding", examples=128, global_batch_size=32,
               steps=20, optimizer="momentum", learning_rate=0.05,
               lr_scaling="cowclip", batch_scale=8, cowclip_min_norm=1e-5)
"""CowClip's runs: S fixed, as one process's update averages fewer samples."""

PARTS = dict(case="embedding", examples=128, global_batch_size=32, steps=20,
             optimizer="momentum", learning_rate=0.05, lr_scaling="adascale",
             adascale_smoothing=0.5)
"""AdaScale per part's runs."""

ON_TWO = {"cowclip": dict(COWCLIP, cowclip_ratio=1e-4, accumulation_steps=4),
          "parts": dict(PARTS, adascale_parts="embeddings,dense",
                        accumulation_steps=4)}
"""Runs on 2 Horovod ranks and on 2 mirrored replicas, k = 4, each against
one process (ON_ONE)."""

ON_ONE = {("cowclip", "one"): dict(COWCLIP, cowclip_ratio=1e-4),
          ("cowclip", "unclipped"): dict(COWCLIP, cowclip_ratio=1e6),
          ("parts", "one"): dict(PARTS, accumulation_steps=8,
                                 adascale_parts="embeddings,dense"),
          ("parts", "whole"): dict(PARTS, accumulation_steps=8,
                                   adascale_parts="all")}


def _reference_runs():
  """({job: [run flags]}, {(mode, name): (job, index)}) of every reference
  run of this module's tests: one job per backend ("none", "horovod",
  "multi_worker_mirrored") trains them all, so the module pays for three
  job starts (imports, rendezvous) instead of one per fixture and backend.

  Mode "mirrored" runs in the "none" job's process, before every other
  run there (dump_run's --runs), and "large" is that process's one-piece
  micro-batch reference; each run states all its flags.
  """
  jobs = {"none": [], "horovod": [], "multi_worker_mirrored": []}
  index = {}

  def add(mode, name, flags):
    job = "none" if mode in ("mirrored", "large") else mode
    if mode == "mirrored":
      flags = dict(flags, distribution="mirrored")
    index[(mode, name)] = (job, len(jobs[job]))
    jobs[job].append(flags)

  k = dict(accumulation_steps=MICRO_BATCH_K)
  add("mirrored", "backends", BACKEND_RUNS["backends"])
  for case in MICRO_BATCH_CASES:
    add("mirrored", ("micro", case), dict(MICRO_BATCH_FLAGS, case=case, **k))
  for i, flags in enumerate(GAINS_RUNS[:len(golden.GAINS)]):
    add("mirrored", ("gains", i), flags)
  for name, flags in ON_TWO.items():
    add("mirrored", name, flags)
  for name, flags in ON_ONE.items():
    add("none", name, flags)
  add("none", "backends", BACKEND_RUNS["backends"])
  for case in MICRO_BATCH_CASES:
    add("large", ("micro", case), dict(MICRO_BATCH_FLAGS, case=case))
  for optimizer, case in ACCUMULATION_CASES:
    add("none", ("accumulation", optimizer, case),
        dict(ACCUMULATION_FLAGS, optimizer=optimizer, case=case))
  for mode in ("horovod", "multi_worker_mirrored"):
    for name, flags in BACKEND_RUNS.items():
      if (mode, name) != ("multi_worker_mirrored", "sparse_adascale"):
        add(mode, name, flags)
    for case in MICRO_BATCH_CASES:
      add(mode, ("micro", case), dict(MICRO_BATCH_FLAGS, case=case, **k))
    for i, flags in enumerate(GAINS_RUNS):
      add(mode, ("gains", i), flags)
  for optimizer, case in ACCUMULATION_CASES:
    add("horovod", ("accumulation", optimizer, case),
        dict(ACCUMULATION_FLAGS, optimizer=optimizer, case=case,
             accumulation_steps=4))
  for name, flags in ON_TWO.items():
    add("horovod", name, flags)
  return jobs, index


@pytest.fixture(scope="module")
def references(tmp_path_factory):
  """(mode, name) -> the out directory of that reference run on `mode`
  (see _reference_runs)."""
  jobs, index = _reference_runs()
  out = shared.runs_once(tmp_path_factory, "references", _run_mode,
                         {job: (runs, {}) for job, runs in jobs.items()})
  return lambda mode, name: out(*index[(mode, name)])


@pytest.fixture(scope="module")
def backend_runs(references):
  """(mode, name) -> the out directory of BACKEND_RUNS[name] on `mode`."""
  return references


def test_backends_end_with_the_same_variables_and_shard_disjointly(
    backend_runs):
  results = {}
  for mode in ("none", "horovod", "multi_worker_mirrored", "mirrored"):
    out = backend_runs(mode, "backends")
    workers = load_workers(out)
    assert len(workers) == (2 if mode in ("horovod",
                                          "multi_worker_mirrored") else 1)
    _assert_workers_identical(workers)
    results[mode] = trained_variables(workers[0])
    assert all(int(w["global_step@0"]) == 20 for w in workers)
    if len(workers) == 2:
      seen = [set(w["__ids__"].tolist()) for w in workers]
      assert not seen[0] & seen[1], f"{mode}: workers read the same examples"
      assert seen[0] | seen[1] == set(range(64)), mode
    cores = [set(r["cores"]) for r in load_results(out)]
    unbound_host = len(os.sched_getaffinity(0)) == os.cpu_count() >= 2
    if mode == "horovod" and unbound_host:
      # Each rank bound to its own share of this host's cores.
      assert all(cores) and not cores[0] & cores[1], cores
      assert cores[0] | cores[1] == os.sched_getaffinity(0), cores
  reference = results.pop("none")
  for mode, variables in results.items():
    assert max_difference(reference, variables) <= TOLERANCE, mode


@pytest.fixture(scope="module")
def adascale_gains(references):
  """(mode, i) -> the workers of golden.GAINS[i] on `mode`, or for
  i = len(golden.GAINS) (horovod and multi_worker_mirrored) of 2 workers x
  2 micro-batches of one row of eye(4) each (GAINS_RUNS)."""
  return lambda mode, i: load_workers(references(mode, ("gains", i)))


@pytest.mark.parametrize("mode", ["mirrored", "multi_worker_mirrored",
                                  "horovod"])
def test_adascale_golden_gains_in_every_mode(mode, adascale_gains):
  for i, (rows, gain, tolerance) in enumerate(golden.GAINS):
    workers = adascale_gains(mode, i)
    assert len(workers) == (1 if mode == "mirrored" else 2), (mode, rows)
    for worker in workers:
      assert float(worker["adascale/gain@0"]) == pytest.approx(
          gain, abs=tolerance), (mode, rows)


@pytest.mark.parametrize("mode", ["horovod", "multi_worker_mirrored"])
def test_adascale_gain_over_workers_and_micro_batches(mode, adascale_gains):
  workers = adascale_gains(mode, len(golden.GAINS))
  assert len(workers) == 2
  for worker in workers:
    assert float(worker["adascale/gain@0"]) == pytest.approx(4.0, abs=1e-5)
    assert float(worker["adascale/scale@0"]) == 4.0


@pytest.fixture(scope="module")
def accumulation(references):
  """(mode, optimizer, case) -> the workers of 2 Horovod ranks at k = 4
  ("horovod") or of one process at k = 1 ("none")."""
  return lambda mode, *case: load_workers(
      references(mode, ("accumulation", *case)))


@pytest.mark.parametrize("optimizer,case", ACCUMULATION_CASES)
def test_accumulation_on_two_horovod_ranks(optimizer, case, accumulation):
  workers = accumulation("horovod", optimizer, case)
  assert len(workers) == 2
  _assert_workers_identical(workers)
  (one,) = accumulation("none", optimizer, case)
  reference = trained_variables(one)
  assert max_difference(reference, trained_variables(workers[0])) <= TOLERANCE


def _assert_two_equal(references, name, reference):
  """ON_TWO[name]'s runs end with the one process's `reference`."""
  for mode in ("horovod", "mirrored"):
    workers = load_workers(references(mode, name))
    assert len(workers) == (2 if mode == "horovod" else 1), mode
    _assert_workers_identical(workers)
    assert max_difference(reference,
                          trained_variables(workers[0])) <= TOLERANCE, mode


def test_cowclip_on_horovod_and_mirrored_equals_one_process(references):
  # 2 ranks (or 2 replicas) x k = 4 against one process at k = 1: each
  # id's count and gradient are the whole update's, whichever way the rows
  # travelled.
  (one,), (unclipped,) = (load_workers(references("none", ("cowclip", run)))
                          for run in ("one", "unclipped"))
  reference = trained_variables(one)
  assert max_difference(reference, trained_variables(unclipped)) > 1e-3
  _assert_two_equal(references, "cowclip", reference)


def test_adascale_parts_on_horovod_and_mirrored_equals_one_process(
    references):
  # 2 ranks (or 2 replicas) x k = 4 against one process at k = 8, the same
  # 8 micro-batches per update: each part's norms are the whole update's.
  (one,), (whole,) = (load_workers(references("none", ("parts", run)))
                      for run in ("one", "whole"))
  reference = trained_variables(one)
  assert max_difference(reference, trained_variables(whole)) > 1e-3
  assert float(one["adascale/embeddings/gain@0"]) != pytest.approx(
      float(one["adascale/gain@0"]), rel=1e-2)
  _assert_two_equal(references, "parts", reference)


@pytest.fixture(scope="module")
def micro_batches(references):
  """(mode, case) -> the workers of global batches of 16 in one piece on
  one process ("large") or in k = 4 micro-batches on `mode`."""
  return lambda mode, case: load_workers(references(mode, ("micro", case)))


@pytest.mark.parametrize("case", MICRO_BATCH_CASES)
def test_micro_batches_equal_one_large_batch_on_every_backend(case,
                                                             micro_batches):
  # Keras layers made in logits, a subclassed tf.keras.Model, v1 layers, a
  # label-free model and sparse gradients: k = 4 micro-batches on every
  # distributed backend against one batch of 4x the size on one process
  # (tests/unit/test_accumulation.py covers "none" in-process).
  # AdaScale at S = 1: its norms and reductions run, its gain is exactly 1.
  (large,) = micro_batches("large", case)
  reference = trained_variables(large)
  for mode in ("mirrored", "horovod", "multi_worker_mirrored"):
    workers = micro_batches(mode, case)
    assert len(workers) == (1 if mode == "mirrored" else 2), mode
    _assert_workers_identical(workers)
    assert max_difference(reference,
                          trained_variables(workers[0])) <= TOLERANCE, mode


def test_handwritten_model_fn_trains_digits_on_two_horovod_ranks(tmp_path):
  out = tmp_path / "result.json"
  horovod(2, ["-m", "tests.workers.handwritten", "--distribution=horovod",
              f"--model_dir={tmp_path / 'model'}", f"--out={out}"])
  result = json.loads(out.read_text())
  assert result["workers"] == 2 and result["global_step"] == 300
  assert result["accuracy"] >= 0.95, result
  assert 1.0 < result["gain"] <= 8.0  # S = 2 ranks x 4 micro-batches


def test_keras_digits_with_accumulation_and_adascale_on_two_ranks(tmp_path):
  summary = tmp_path / "summary.json"
  horovod(2, ["-m", "estimator_scale.cli", "--distribution=horovod",
              f"--model_dir={tmp_path / 'model'}", f"--summary_json={summary}"]
          + KERAS_ADASCALE)
  result = json.loads(summary.read_text())
  assert result["eval"]["accuracy"] >= 0.95, result
  assert 1.0 < result["adascale_gain"] <= 8.0  # S = 2 ranks x 4


def _wait_for(path, timeout=60):
  waiting.wait_for(lambda: os.path.exists(path), path,
                   time.monotonic() + timeout)


def test_sigterm_stops_all_ranks_together_and_restart_continues(tmp_path):
  model_dir, out = tmp_path / "model", tmp_path / "run1"
  args = dump_args(out, model_dir, distribution="horovod", case="mlp",
                   global_batch_size=8, steps=10000, sleep_per_step=0.05,
                   save_checkpoints_steps=5)
  proc = subprocess.Popen(horovodrun_argv(2, args), cwd=ROOT,
                          env=worker_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
  pid_file = os.path.join(out, "worker1.npz.pid")
  _wait_for(pid_file)
  _wait_for(model_dir / "checkpoint")
  time.sleep(1.0)
  os.kill(int(open(pid_file).read()), signal.SIGTERM)
  output, _ = proc.communicate(timeout=60)
  assert proc.returncode == 0, output[-3000:]
  results = load_results(out)
  assert [r["stopped_by_signal"] for r in results] == [True, True]
  stop_step = results[0]["last_step"]
  assert results[1]["last_step"] == stop_step and 0 < stop_step < 10000
  _assert_workers_identical(load_workers(out))
  assert f"model.ckpt-{stop_step}.index" in os.listdir(model_dir)
  # Restart: both ranks resume from the step the signal stopped them at.
  horovod(2, dump_args(tmp_path / "run2", model_dir, distribution="horovod",
                       case="mlp", global_batch_size=8, steps=stop_step + 3))
  second = load_results(tmp_path / "run2")
  assert [r["first_step"] for r in second] == [stop_step, stop_step]
  assert [r["last_step"] for r in second] == [stop_step + 3] * 2
  _assert_workers_identical(load_workers(tmp_path / "run2"))
  # Restart at max_steps: every rank exits 0 at once without training.
  start = time.time()
  horovod(2, dump_args(tmp_path / "run3", model_dir, distribution="horovod",
                       case="mlp", global_batch_size=8, steps=stop_step + 3))
  # A rank that waited in a collective for one that had exited would hold
  # the job until Gloo's timeout, minutes; starting two ranks takes seconds.
  assert time.time() - start < 45
  assert [r["last_step"] for r in load_results(tmp_path / "run3")] == [
      stop_step + 3] * 2


def test_uneven_input_fails_fast_instead_of_hanging(tmp_path):
  start = time.time()
  proc = horovod(2, dump_args(tmp_path / "out", tmp_path / "model",
                              distribution="horovod", case="mlp",
                              global_batch_size=8, steps=40,
                              uneven_extra_rank=1), check=False, timeout=120)
  # A hang would last until Gloo's timeout, past this bound and the 120 s
  # one; 40 updates of 8 examples take seconds.
  assert time.time() - start < 60
  assert proc.returncode != 0
  assert "training input ended at step" in proc.stdout + proc.stderr


def test_horovod_ranks_stop_together_at_tau_from_the_cli(tmp_path):
  """AdaScale's stop at tau is a requested stop, not an input that ran out."""
  summary, target, scale = tmp_path / "summary.json", 40, 4
  horovod(2, ["-m", "estimator_scale.cli", "--model=linear_regression",
              "--distribution=horovod", f"--model_dir={tmp_path / 'model'}",
              "--global_batch_size=32", "--accumulation_steps=2",
              "--optimizer=sgd", "--lr_scaling=adascale",
              f"--scale_invariant_steps={target}", "--train_steps=100000",
              f"--summary_json={summary}"])
  result = json.loads(summary.read_text())
  assert result["adascale_progress"] >= target
  assert -(-target // scale) <= result["updates"] <= target


def test_only_rank_zero_writes(tmp_path):
  scratch = tmp_path / "tmp"
  scratch.mkdir()
  env = dict(worker_env(), TMPDIR=str(scratch))
  model_dir, export = tmp_path / "model", tmp_path / "export"
  horovod(2, dump_args(tmp_path / "out", model_dir, distribution="horovod",
                       case="mlp", global_batch_size=8, steps=10,
                       save_checkpoints_steps=5, evaluate=True,
                       export_dir=export), env=env)
  events = [f for f in os.listdir(model_dir) if f.startswith("events.")]
  assert len(events) == 1, os.listdir(model_dir)
  assert len(os.listdir(export)) == 1
  results = load_results(tmp_path / "out")
  assert results[0]["eval"] == results[1]["eval"]
  assert results[0]["export"] == results[1]["export"]
  assert os.listdir(scratch) == []
  # A user's saving listener runs where the checkpoint is saved.
  assert results[0]["saved_steps"] == [0, 5, 10]
  assert results[1]["saved_steps"] == []


def _kill_a_worker_and_expect_all_gone(command, out):
  """SIGKILLs worker 1 mid-run: the job must exit non-zero within 60 s and
  leave no worker process behind. Its output goes to a file: a pipe no one
  reads would fill and stop the workers before they start."""
  log = out.parent / "job.log"
  with open(log, "w", encoding="utf-8") as f:
    proc = subprocess.Popen(command, cwd=ROOT, env=worker_env(), stdout=f,
                            stderr=subprocess.STDOUT)
  paths = [os.path.join(out, f"worker{i}.npz.pid") for i in (0, 1)]
  for path in paths:
    waiting.wait_for(lambda path=path: os.path.exists(path), path,
                     time.monotonic() + 120, proc=proc, log=log)
  pids = [int(open(path).read()) for path in paths]
  os.kill(pids[1], signal.SIGKILL)
  proc.wait(timeout=60)  # a hang would last until Gloo's timeout
  assert proc.returncode != 0
  waiting.until_gone(pids, 30)


def test_launcher_stops_everything_when_a_worker_dies(tmp_path):
  out = tmp_path / "out"
  _kill_a_worker_and_expect_all_gone(
      launch_argv(2, dump_args(out, tmp_path / "model",
                               distribution="multi_worker_mirrored",
                               case="mlp", global_batch_size=8, steps=100000,
                               sleep_per_step=0.05)), out)


def test_horovodrun_fails_when_a_rank_dies(tmp_path):
  out = tmp_path / "out"
  _kill_a_worker_and_expect_all_gone(
      horovodrun_argv(2, dump_args(out, tmp_path / "model",
                                   distribution="horovod", case="mlp",
                                   global_batch_size=8, steps=100000,
                                   sleep_per_step=0.05)), out)


@pytest.mark.parametrize("mode,workers", [("horovod", 2),
                                          ("multi_worker_mirrored", 2),
                                          ("parameter_server", 3)])
def test_train_evaluate_train_loop(mode, workers, backend_runs, tmp_path):
  if mode == "parameter_server":
    out = tmp_path / "out"
    launch(2, dump_args(out, tmp_path / "model", distribution=mode,
                        **dict(BACKEND_RUNS["train_evaluate"],
                               global_batch_size=6)), ps=1, timeout=240)
  else:
    out = backend_runs(mode, "train_evaluate")
  results = load_results(out)
  assert len(results) == workers
  # Asynchronous trainers stop once they see step 20 after a step of their
  # own (Estimator's StopAtStepHook checks after each step, not before the
  # first): a trainer whose round began at step 20, the others done, adds
  # one step, so the last may end workers - 1 steps past it.
  late = workers - 1 if mode == "parameter_server" else 0
  assert all(20 <= r["last_step"] <= 20 + late for r in results), results
  assert all(r["eval"] == results[0]["eval"] for r in results)
  assert results[0]["eval"]["global_step"] == 20
  # A user's saving listener runs on the chief, which saves at the end;
  # under multi_worker_mirrored Estimator would drop it: refused.
  if mode == "multi_worker_mirrored":
    assert all("saving_listeners under distribution=multi_worker_mirrored"
               in r["listeners_refused"] for r in results), results
    return
  assert results[0]["saved_steps"][-1] == results[0]["last_step"], results
  assert all(r["saved_steps"] == [] for r in results[1:]), results


def test_restart_with_more_workers_continues_progress_with_new_scale(tmp_path):
  model_dir = tmp_path / "model"
  flags = dict(case="mlp", global_batch_size=8, accumulation_steps=2,
               lr_scaling="adascale", optimizer="momentum")
  run([PYTHON] + dump_args(tmp_path / "one", model_dir, steps=5, **flags))
  tau = float(load_workers(tmp_path / "one")[0]["adascale/progress@0"])
  assert float(load_workers(tmp_path / "one")[0]["adascale/scale@0"]) == 2
  horovod(2, dump_args(tmp_path / "two", model_dir, distribution="horovod",
                       steps=8, **flags))
  for worker in load_workers(tmp_path / "two"):
    assert float(worker["adascale/scale@0"]) == 4
    assert float(worker["adascale/progress@0"]) >= tau + 3
  assert [r["first_step"] for r in load_results(tmp_path / "two")] == [5, 5]


def test_adascale_with_sparse_gradients_on_horovod(backend_runs):
  workers = load_workers(backend_runs("horovod", "sparse_adascale"))
  assert len(workers) == 2
  _assert_workers_identical(workers)
  gains = [float(w["adascale/gain@0"]) for w in workers]
  assert gains[0] == gains[1] and 1.0 <= gains[0] <= 4.0

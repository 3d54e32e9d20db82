"""Feature columns, lookup tables and sparse gradients across real processes.

Feature-column models at accumulation_steps=4 on every backend against one
process, a planted rule learnt to its AUC on one process and two Horovod
ranks, and the rows Horovod ranks send each other counted.
"""
import json

import numpy as np
import pytest

from tests.helpers import shared
from tests.helpers.processes import PYTHON, dump_args, horovod, launch, run
from tests.helpers.results import (load_workers, max_difference,
                                   trained_variables)
from tests.workers import feature_models
from tests.workers import sparse_exchange

TOLERANCE = 1e-5


def _dump_run(mode, out, model_dir, **flags):
  """Trains tests.workers.dump_run under `mode`; returns each worker's variables."""
  if mode == "horovod":
    horovod(2, dump_args(out, model_dir, distribution=mode, **flags))
  elif mode == "multi_worker_mirrored":
    launch(2, dump_args(out, model_dir, distribution=mode, **flags))
  else:
    run([PYTHON] + dump_args(out, model_dir, distribution=mode, **flags))
  return [trained_variables(w) for w in load_workers(out)]


@pytest.fixture(scope="module")
def accumulated(tmp_path_factory):
  """(mode, case) -> each worker's variables after global batches of 32 in
  one piece on one process ("large") or in k = 4 micro-batches on `mode`."""
  out = shared.micro_batch_runs(
      tmp_path_factory, "feature-columns", _dump_run,
      [{"case": case} for case in feature_models.CASES], examples=128,
      global_batch_size=32, steps=6, optimizer="sgd", learning_rate=0.1,
      lr_scaling="adascale", batch_scale=1.0)
  return lambda mode, case: [
      trained_variables(w)
      for w in load_workers(out(mode, feature_models.CASES.index(case)))]


@pytest.mark.parametrize("case", feature_models.CASES)
def test_feature_columns_accumulate_exactly_on_every_backend(case,
                                                             accumulated):
  # Every column kind (feature_columns), shared embeddings through
  # DenseFeatures, tables made inside the network (lookup_tables): k = 4 on
  # every distributed backend against one batch 4x the size on one process
  # (tests/unit/test_accumulation.py covers "none" in-process). SGD, since
  # tf.distribute applies a feature column's embedding gradient densely
  # (momentum would move the rows an update did not touch); AdaScale at
  # S = 1 runs its norms and reductions with a gain of exactly 1.
  (reference,) = accumulated("large", case)
  assert len(reference) >= 3, sorted(reference)
  for mode in ("mirrored", "horovod", "multi_worker_mirrored"):
    workers = accumulated(mode, case)
    assert len(workers) == (1 if mode == "mirrored" else 2)
    for variables in workers:
      assert max_difference(reference, variables) <= TOLERANCE, mode


@pytest.mark.parametrize("case", ["feature_columns", "lookup_tables"])
def test_feature_columns_train_on_parameter_servers(case, tmp_path):
  # Asynchronous, so nothing to compare exactly: the job runs to its step
  # with finite variables (tables and embeddings placed as the ps job does).
  out = tmp_path / "out"
  launch(2, dump_args(out, tmp_path / "model", distribution="parameter_server",
                      case=case, examples=128, global_batch_size=96, steps=6,
                      accumulation_steps=4, optimizer="momentum"), ps=1)
  # The chief's dump, and the worker's where it trained: it does only when
  # it opens its session before the chief has reached the last step.
  chief, *worker = load_workers(out)
  assert int(chief["global_step@0"]) == 6
  assert len(worker) <= 1
  for dump in [chief] + worker:
    variables = trained_variables(dump)
    assert len(variables) >= 4, sorted(variables)
    assert all(np.all(np.isfinite(v)) for v in variables.values())


def _planted_auc(tmp_path, name, ranks):
  out = tmp_path / f"{name}.json"
  args = ["-m", "tests.workers.planted_auc", f"--model_dir={tmp_path / name}",
          f"--out={out}"]
  if ranks > 1:
    horovod(ranks, args + ["--distribution=horovod"])
  else:
    run([PYTHON] + args)
  return json.loads(out.read_text())


def test_feature_columns_reach_the_planted_auc_on_one_and_two_ranks(tmp_path):
  one = _planted_auc(tmp_path, "one", 1)
  two = _planted_auc(tmp_path, "two", 2)
  for result, samples in ((one, 4), (two, 8)):  # S = ranks x 4 micro-batches
    assert result["global_step"] == 300, result
    assert abs(result["auc"] - result["planted_auc"]) <= 0.01, result
    assert 1.0 < result["gain"] <= samples, result


EXCHANGES = {"rows1000-auto": (1000, "auto"), "rows8-auto": (8, "auto"),
             "rows8-sparse": (8, "sparse"), "rows8-dense": (8, "dense")}
"""Each run on 2 Horovod ranks: (table rows, sparse_exchange)."""


def _exchanges(root, ranks, runs):
  """Trains tests.workers.sparse_exchange's `runs` ({name: (rows, exchange)})
  in one job of `ranks` processes under `root`."""
  args = ["-m", "tests.workers.sparse_exchange", f"--out_dir={root / 'out'}",
          f"--model_dir={root / 'model'}", "--runs=" + ",".join(
              f"{name}:{rows}:{exchange}"
              for name, (rows, exchange) in runs.items())]
  if ranks > 1:
    horovod(ranks, args + ["--distribution=horovod"])
  else:
    run([PYTHON] + args)


@pytest.fixture(scope="module")
def exchanges(tmp_path_factory):
  """name -> (per-rank JSON results, rank 0's variables) of EXCHANGES[name]
  on 2 ranks, or of `reference-<rows>` on one process; each job once per
  session."""
  references = {f"reference-{rows}": (rows, "auto") for rows in (1000, 8)}
  jobs = {"sparse-exchanges": lambda root: _exchanges(root, 2, EXCHANGES),
          "sparse-exchange-references":
              lambda root: _exchanges(root, 1, references)}

  def results(name):
    roots = shared.once_all(tmp_path_factory, jobs)
    ranks = 2 if name in EXCHANGES else 1
    job = "sparse-exchanges" if ranks == 2 else "sparse-exchange-references"
    out = roots[job] / "out" / name
    return ([json.loads((out / f"rank{r}.json").read_text())
             for r in range(ranks)], dict(np.load(out / "rank0.npz")))
  return results


def _unique_rows_per_update(results):
  """Per update, the sum over ranks of the distinct ids each rank looked up."""
  tokens = sparse_exchange.token_data()[0]["tokens"]
  per_rank = [[len(np.unique(tokens[ids])) for ids in r["ids"]]
              for r in results]
  return [sum(counts) for counts in zip(*per_rank)]


def test_horovod_sends_each_touched_row_once_per_rank(exchanges):
  # Every example looks up ids 0..4 sixteen times in all, so a rank's update
  # (4 micro-batches of 8 examples: 512 lookups) touches 5 or 6 rows;
  # Horovod's own allreduce of IndexedSlices would gather all 1024 lookups.
  results, weights = exchanges("rows1000-auto")
  expected = _unique_rows_per_update(results)
  assert all(10 <= rows <= 12 for rows in expected), expected
  for result in results:
    assert result["rows"] == [[rows] for rows in expected]
  assert max_difference(exchanges("reference-1000")[1], weights) <= TOLERANCE


@pytest.mark.parametrize("sparse_exchange_flag", ["auto", "sparse", "dense"])
def test_dense_or_sparse_exchange_trains_as_one_process(sparse_exchange_flag,
                                                        exchanges):
  # An 8-row table: the 10 or so rows the ranks gather exceed it, so "auto"
  # goes dense from the second update (from the first update's count).
  # Momentum: the rare id 6 is looked up in some updates only, and a dense
  # gradient applied as such would keep moving its row in the others.
  results, weights = exchanges(f"rows8-{sparse_exchange_flag}")
  gathered = results[0]["rows"]
  expected = _unique_rows_per_update(results)
  if sparse_exchange_flag == "dense":
    assert gathered == [[]] * len(expected)  # no allgather in the graph
  elif sparse_exchange_flag == "sparse":
    assert gathered == [[rows] for rows in expected]
  else:
    assert gathered == [[expected[0]]] + [[0]] * (len(expected) - 1)
  assert max_difference(exchanges("reference-8")[1], weights) <= TOLERANCE

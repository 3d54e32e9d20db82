"""Inputs built without `topology=` shard as the Estimator's job does.

2 Horovod ranks and 2 multi_worker_mirrored workers each train an epoch of
`es.inputs.from_arrays` and then one of `es.inputs.from_tfrecords`, neither
given a topology (tests/workers/default_topology_run.py): 96 examples,
global batch 8 in 2 micro-batches, 12 updates an epoch. Each update must
train 8 examples over the job, and each epoch every example exactly once;
an input that read as one local process would have each rank train the
whole global batch, in the same order.
"""
import collections

import pytest

import estimator_scale as es
from tests.helpers import trained_ids
from tests.helpers.processes import horovod, launch
from tests.workers.tiny_models import generated_data

_EXAMPLES, _GLOBAL_BATCH = 96, 8


@pytest.mark.parametrize("backend", ["horovod", "multi_worker_mirrored"])
def test_inputs_without_topology_train_each_example_once_per_epoch(
    backend, tmp_path):
  _, features, labels = generated_data("mlp", _EXAMPLES)
  es.inputs.write_tfrecord_shards(features, labels, str(tmp_path / "data"),
                                  12)
  out = tmp_path / "ids"
  args = ["-m", "tests.workers.default_topology_run",
          f"--distribution={backend}", f"--model_dir={tmp_path / 'model'}",
          f"--out_dir={out}", f"--tfrecords={tmp_path / 'data' / '*'}",
          f"--examples={_EXAMPLES}", f"--global_batch_size={_GLOBAL_BATCH}"]
  if backend == "horovod":
    horovod(2, args)
  else:
    launch(2, args)
  for run in ("arrays", "tfrecords"):
    records = trained_ids.read(out, run)
    assert sorted({r["worker"] for r in records}) == [0, 1], run
    assert all(r["size"] == 2 for r in records), run
    per_update = collections.defaultdict(list)
    for record in records:
      per_update[record["step"]] += record["ids"]
    assert len(per_update) == _EXAMPLES // _GLOBAL_BATCH, (run, per_update)
    assert all(len(ids) == _GLOBAL_BATCH for ids in per_update.values()), (
        run, per_update)
    assert sorted(trained_ids.trained(out, run)) == list(range(_EXAMPLES)), (
        run, per_update)

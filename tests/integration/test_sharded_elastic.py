"""An elastic Horovod job grows from 2 to 3 ranks with a sharded table.

horovodrun's elastic driver runs `tests.workers.sharded_elastic` on this
host's slots, which its discovery script lists: 2, until rank 0 grows the
list to 3 after the first update. The ranks leave at the first commit
that sees the change; 3 ranks start from that commit and train to the
end. Each rank's dumps (its shard and Adagrad slots, the dense layer) show:
the 3 ranks' rows right after the resume are, exactly, the rows the 2 ranks
held at that commit, re-cut into 3 ranges; the dense variables likewise;
and the 3 ranks train on to the last step, which they save as one table.
With a dynamic table, each of the 3 ranks holds exactly the ids it owns
among 3 after the resume, each with the row, slot, count and last update
it had at the commit.
"""
import re

import numpy as np
import tensorflow as tf

from estimator_scale.embeddings import sharded
from tests.helpers import dynamic_rows
from tests.helpers.processes import HOROVODRUN, PYTHON, run, worker_env
from tests.helpers.rig import discovery
from tests.workers import sharded_equivalence

STEPS = 16
COMMIT = 4
TABLE = "model/table"
SHARDED = (TABLE, TABLE + "/Adagrad")
RANGES = [sharded.shard_range(sharded_equivalence.VOCABULARY, 3, rank)[1]
          for rank in range(3)]
"""Rows each of the 3 ranks holds."""


def _dumps(out, event, step, size):
  values = []
  for rank in range(size):
    with np.load(out / f"{event}-{step}-of{size}-rank{rank}.npz") as dump:
      values.append(dict(dump))
  return values


def _whole(dumps, name):
  return np.concatenate([dump[name] for dump in dumps])


def _grow(tmp_path, kind):
  """(the job's output, the dumps' and the model's directories, the step
  it resumed at on 3 ranks) of an elastic job growing from 2 to 3."""
  hosts, discover = discovery(tmp_path, "localhost")
  hosts.write_text("localhost:2\n")
  out, model_dir = tmp_path / "out", tmp_path / "model"
  # A joining rank imports TensorFlow before it meets the others, which
  # wait for it: longer than Gloo's default 30 s on a busy machine.
  env = dict(worker_env(), HOROVOD_GLOO_TIMEOUT_SECONDS="120")
  proc = run([HOROVODRUN, "--gloo", "--network-interface", "lo", "-np", "2",
              "--min-np", "2", "--max-np", "3", "--host-discovery-script",
              str(discover), PYTHON, "-m", "tests.workers.sharded_elastic",
              f"--model_dir={model_dir}", f"--out_dir={out}",
              f"--hosts_file={hosts}", f"--steps={STEPS}",
              f"--commit_every_n_steps={COMMIT}", f"--kind={kind}"],
             timeout=240, env=env)
  log = proc.stdout + proc.stderr
  [resumed] = map(int, re.findall(
      r"elastic Horovod: 2 -> 3 ranks \(the hosts changed\), resuming at "
      r"step (\d+)", log))
  assert resumed % COMMIT == 0 and COMMIT <= resumed < STEPS, resumed
  assert (f"Sharded tables restored from {model_dir}/sharded_tables/"
          f"ckpt-{resumed} on 3 ranks") in log
  # The 2 ranks left at that commit: none of them saw a later one.
  assert not list(out.glob(f"commit-{resumed + COMMIT}-of2-*"))
  return log, out, model_dir, resumed


def test_a_sharded_table_reshards_from_the_commit_when_a_rank_joins(tmp_path):
  _, out, model_dir, resumed = _grow(tmp_path, "sharded")
  committed = _dumps(out, "commit", resumed, 2)
  started = _dumps(out, "start", resumed, 3)
  for name in SHARDED:
    assert [len(dump[name]) for dump in started] == RANGES, name
    np.testing.assert_array_equal(_whole(started, name),
                                  _whole(committed, name), err_msg=name)
  for name, value in committed[0].items():
    if name not in SHARDED:
      for dump in started:
        np.testing.assert_array_equal(dump[name], value, err_msg=name)

  ended = _dumps(out, "end", STEPS, 3)
  assert [len(dump[TABLE]) for dump in ended] == RANGES
  assert np.max(np.abs(_whole(ended, TABLE) - _whole(started, TABLE))) > 1e-3
  merged = tf.train.load_checkpoint(
      str(model_dir / "sharded_tables" / f"ckpt-{STEPS}"))
  for name in SHARDED:
    np.testing.assert_array_equal(merged.get_tensor(name),
                                  _whole(ended, name), err_msg=name)


def test_a_dynamic_table_moves_rows_to_their_owners_when_a_rank_joins(
    tmp_path):
  log, out, model_dir, resumed = _grow(tmp_path, "dynamic")
  assert "Dynamic tables re-sharded from 2 to 3 ranks" in log
  committed = dynamic_rows.by_id(_dumps(out, "commit", resumed, 2), TABLE)
  started = dynamic_rows.by_id(_dumps(out, "start", resumed, 3), TABLE)
  assert len(committed[TABLE + "/ids"]) > 10
  dynamic_rows.assert_same(started, committed, 0, f"step {resumed}")
  ended = dynamic_rows.by_id(_dumps(out, "end", STEPS, 3), TABLE)
  merged = tf.train.load_checkpoint(
      str(model_dir / "sharded_tables" / f"ckpt-{STEPS}"))
  ids = merged.get_tensor(TABLE + "/ids")
  assert set(ended[TABLE + "/ids"]) == set(ids[ids >= 0].tolist())

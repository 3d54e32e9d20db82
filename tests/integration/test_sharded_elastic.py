"""Elastic Horovod jobs grow from 2 to 3 ranks and shrink back to 2.

horovodrun's elastic driver runs `tests.workers.sharded_elastic` on this
host's slots, which its discovery script lists: 2, until rank 0 grows the
list to 3 after the first update, and 2 again from update 12. The ranks
leave at the first commit that sees a change and the new ones start from
it. With a sharded table, each rank's dumps (its shard and Adagrad slots,
the dense layer) show: the rows right after each resume are, exactly, the
rows held at that commit, re-cut into the new ranges (the shrink's from a
full save and the deltas of the rows 3 ranks changed); the dense
variables likewise; and the 2 ranks train on to the last step, which they
save as one table. With a dynamic table, after
each resume each rank holds exactly the ids it owns at the new size, each
with the row, slot, count and last update it had at the commit, and every
example is trained once an epoch; its commits after a session's first are
deltas, and it shrinks back from them.
"""
import re

import numpy as np
import tensorflow as tf

from estimator_scale.embeddings import sharded
from tests.helpers import dynamic_rows
from tests.helpers import trained_ids
from tests.helpers.processes import PYTHON, horovodrun, run, worker_env
from tests.helpers.rig import discovery
from tests.workers import sharded_equivalence

STEPS = 24
COMMIT = 4
TABLE = "model/table"
SHARDED = (TABLE, TABLE + "/Adagrad")


def _dumps(out, event, step, size):
  values = []
  for rank in range(size):
    with np.load(out / f"{event}-{step}-of{size}-rank{rank}.npz") as dump:
      values.append(dict(dump))
  return values


def _whole(dumps, name):
  return np.concatenate([dump[name] for dump in dumps])


def _elastic(tmp_path, kind, *flags, timeout=240):
  """(the job's output, the dumps' directory, the model_dir) of an elastic
  job that starts on 2 ranks and grows to 3 (and shrinks as `flags` say)."""
  hosts, discover = discovery(tmp_path, "localhost")
  hosts.write_text("localhost:2\n")
  out, model_dir = tmp_path / "out", tmp_path / "model"
  # A joining rank imports TensorFlow before it meets the others, which
  # wait for it: longer than Gloo's default 30 s on a busy machine.
  env = dict(worker_env(), HOROVOD_GLOO_TIMEOUT_SECONDS="120")
  proc = run(horovodrun() + [
      "--gloo", "--network-interface", "lo", "-np", "2", "--min-np", "2",
      "--max-np", "3", "--host-discovery-script", str(discover), PYTHON, "-m",
      "tests.workers.sharded_elastic", f"--model_dir={model_dir}",
      f"--out_dir={out}", f"--hosts_file={hosts}",
      f"--commit_every_n_steps={COMMIT}", f"--kind={kind}", *flags],
             timeout=timeout, env=env)
  return proc.stdout + proc.stderr, out, model_dir


def _resumes(log, model_dir):
  """[(ranks before, ranks after, the step resumed at)] of the job's
  changes of size, each checked to resume at a commit with its tables."""
  resumes = [tuple(map(int, found)) for found in re.findall(
      r"elastic Horovod: (\d+) -> (\d+) ranks \(the hosts changed\), "
      r"resuming at step (\d+)", log)]
  for _, after, step in resumes:
    assert step % COMMIT == 0 and COMMIT <= step, step
    assert re.search(
        rf"Sharded tables restored from {model_dir}/sharded_tables/"
        rf"(ckpt-{step}|ckpt-\d+ and \d+ delta\(s\) after it, to step "
        rf"{step}) on {after} ranks", log), log[-3000:]
  return resumes


def _grow_and_shrink(tmp_path, kind):
  """(the job's output, the dumps' directory, the model_dir, `_resumes`) of
  a job growing to 3 ranks, then shrinking to 2 from update 12 with one
  save in 100 full: from the deltas the 3 ranks wrote."""
  log, out, model_dir = _elastic(
      tmp_path, kind, f"--steps={STEPS}", "--shrink_at_step=12",
      "--full_checkpoint_every=100", timeout=420)
  resumes = _resumes(log, model_dir)
  assert [(before, after) for before, after, _ in resumes] == [(2, 3),
                                                                (3, 2)]
  assert re.search(r"Sharded tables restored from \S+ and \d+ delta\(s\) "
                   rf"after it, to step {resumes[1][2]} on 2 ranks", log), (
                       log[-3000:])
  return log, out, model_dir, resumes


def _ranges(size):
  """Rows each of `size` ranks holds."""
  return [sharded.shard_range(sharded_equivalence.VOCABULARY, size, rank)[1]
          for rank in range(size)]


def test_a_sharded_table_follows_2_3_2_ranks_from_commits_and_deltas(tmp_path):
  """Grown to 3 ranks, shrunk back to 2 from update 12; one save in 100 is
  full, so the 3 ranks' commits after their first are deltas of the rows
  they changed, and the shrink resumes from them."""
  _, out, model_dir, resumes = _grow_and_shrink(tmp_path, "sharded")
  for before, after, step in resumes:
    # None of the ranks before saw a later commit.
    assert not list(out.glob(f"commit-{step + COMMIT}-of{before}-*"))
    committed = _dumps(out, "commit", step, before)
    started = _dumps(out, "start", step, after)
    for name in SHARDED:
      assert [len(dump[name]) for dump in started] == _ranges(after), name
      np.testing.assert_array_equal(_whole(started, name),
                                    _whole(committed, name), err_msg=name)
    for name, value in committed[0].items():
      if name not in SHARDED:
        for dump in started:
          np.testing.assert_array_equal(dump[name], value, err_msg=name)

  ended = _dumps(out, "end", STEPS, 2)
  assert np.max(np.abs(_whole(ended, TABLE) - _whole(started, TABLE))) > 1e-3
  merged = tf.train.load_checkpoint(
      str(model_dir / "sharded_tables" / f"ckpt-{STEPS}"))
  for name in SHARDED:
    np.testing.assert_array_equal(merged.get_tensor(name),
                                  _whole(ended, name), err_msg=name)


def test_a_dynamic_table_follows_2_3_2_ranks_training_each_example_once(
    tmp_path):
  """Grown to 3 ranks after the first update, shrunk back to 2 from update
  12: at each resume the new ranks hold the commit's table, each rank its
  own ids; every example is trained once an epoch but for the updates a
  change lost after its commit, trained again. Only a session's first and
  last saves are full (one in 100): the 3 ranks' commits after their first
  are deltas, so the shrink, at whichever commit sees it, resumes from a
  full checkpoint and the deltas that 3 ranks wrote."""
  log, out, model_dir, resumes = _grow_and_shrink(tmp_path, "dynamic")
  for before, after, step in resumes:
    assert f"Dynamic tables re-sharded from {before} to {after} ranks" in log
    dynamic_rows.assert_same(
        dynamic_rows.by_id(_dumps(out, "start", step, after), TABLE),
        dynamic_rows.by_id(_dumps(out, "commit", step, before), TABLE), 0,
        f"{before} -> {after} at step {step}")
  trained_ids.check_each_once(trained_ids.read(out),
                              len(sharded_equivalence.token_data()[1]))
  # The 2 ranks trained on to the end and saved the table there.
  assert (model_dir / "sharded_tables" / f"ckpt-{STEPS}.index").exists()

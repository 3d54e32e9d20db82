"""Elastic Horovod across hosts of the rig: a host joins, later one dies.

The job starts from host1 under horovodrun's elastic driver on host1 and
host2 (the discovery script prints a file the test rewrites), host3 is
added after some updates, then host2 is killed. It must reach train_steps
with digits_cnn >= 0.95, and rank 0's record of every update shows
global_step and AdaScale's tau continuous across the changes: each restart
resumes at the last commit with the tau that commit holds, no update is
lost beyond it (none at all when a host joins: the ranks leave right after
a commit), and adascale/scale follows the number of ranks. A second job
with --elastic_batch=hold is refused, in one line, when a third host would
break its global batch.
"""
import json
import re
import subprocess
import textwrap
import time

from tests.helpers import waiting
from tests.helpers.checkpoints import checkpoint_step
from tests.helpers.processes import ROOT
from tests.helpers.rig import (ENV, HOROVODRUN_GLOO,
                               assert_no_job_processes_within, discovery,
                               finish, train_argv)


TRAIN_STEPS = 240
COMMIT = 20
ACCUMULATION = 2

RECORDER = textwrap.dedent('''
    """A --model_module for the test: rank 0 records, as JSON lines, the
    step and AdaScale's tau and S it restored and after each update."""
    import json
    import os
    import time

    import horovod.tensorflow as hvd
    import tensorflow as tf

    from model_zoo import digits

    COMMIT, PACE = {commit}, 0.1


    class RecordHook(tf.compat.v1.train.SessionRunHook):

      def begin(self):
        variables = {v.op.name: v for v in tf.compat.v1.global_variables()}
        self._fetches = [tf.compat.v1.train.get_global_step()] + [
            variables[f"adascale/{name}"] for name in ("progress", "scale")]

      def _record(self, session, event):
        if hvd.rank() != 0:
          return
        step, tau, scale = session.run(self._fetches)
        self._step = step
        with open(os.environ["ELASTIC_RECORD"], "a") as f:
          f.write(json.dumps({"event": event, "size": hvd.size(),
                              "pid": os.getpid(), "step": int(step),
                              "tau": float(tau), "scale": float(scale)}) + "\\n")

      def after_create_session(self, session, coord):
        self._record(session, "start")
        self._last = time.monotonic()

      def after_run(self, run_context, run_values):
        self._record(run_context.session, "update")
        # Past the first commits, rank 0 holds every update to PACE seconds
        # at least: a host change takes seconds to reach the ranks, and on a
        # fast machine an unpaced job would finish before the test's changes.
        # The test removes ELASTIC_PACE once it has made its last change.
        if (hvd.rank() == 0 and self._step >= 2 * COMMIT and
            os.path.exists(os.environ["ELASTIC_PACE"])):
          time.sleep(max(0.0, self._last + PACE - time.monotonic()))
          self._last = time.monotonic()


    _training_hooks = digits.DigitsCNN.training_hooks
    digits.DigitsCNN.training_hooks = lambda self, features, labels: (
        list(_training_hooks(self, features, labels)) + [RecordHook()])
''')


def _start(host1, tmp_path, *flags):
  """horovodrun's elastic driver on host1 over the hosts in tmp_path/hosts
  (host1 and host2 to begin with); returns (process, log path, hosts file)."""
  (tmp_path / "recorder.py").write_text(RECORDER.replace("{commit}", str(COMMIT)))
  hosts, discover = discovery(tmp_path, "host1", "host2")
  log = tmp_path / "log"
  (tmp_path / "pace").touch()
  argv = [*HOROVODRUN_GLOO, "-np", "2", "--min-np", "2", "--max-np", "3",
          "--host-discovery-script", str(discover),
          *train_argv(tmp_path / "model", "--global_batch_size=128",
                      f"--accumulation_steps={ACCUMULATION}",
                      "--lr_scaling=adascale", "--model_module=recorder",
                      f"--commit_every_n_steps={COMMIT}", *flags)]
  with open(log, "w") as out:
    proc = host1.popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                       env={**ENV, "PYTHONPATH": str(tmp_path),
                            "ELASTIC_RECORD": str(tmp_path / "record.jsonl"),
                            "ELASTIC_PACE": str(tmp_path / "pace")})
  return proc, log, hosts


def _records(path):
  with open(path) as f:
    return [json.loads(line) for line in f]


def _updates_on(records, size):
  return [r for r in records if r["event"] == "update" and r["size"] == size]


def test_a_host_joins_then_one_dies_and_training_carries_on(cluster, tmp_path):
  host1, host2, host3 = cluster(3, loopback_hostname=True).hosts
  record = tmp_path / "record.jsonl"
  model_dir = tmp_path / "model"
  summary = tmp_path / "summary.json"
  start = time.monotonic()
  proc, log, hosts = _start(host1, tmp_path, f"--train_steps={TRAIN_STEPS}",
                            f"--summary_json={summary}")
  try:
    deadline = start + 300
    waiting.wait_for(lambda: checkpoint_step(model_dir) >= 2 * COMMIT,
                     f"commit at step {2 * COMMIT}", deadline, proc=proc,
                     log=log, traceback_fails=True)
    hosts.write_text("host1:1\nhost2:1\nhost3:1\n")
    waiting.wait_for(lambda: record.exists() and len(
        _updates_on(_records(record), 3)) >= 2 * COMMIT + 5,
                     "updates on 3 ranks", deadline, proc=proc, log=log,
                     traceback_fails=True)
    host2.kill_all()
    hosts.write_text("host1:1\nhost3:1\n")
    # No update completes without host2's rank: the rest need no pace.
    (tmp_path / "pace").unlink()
  finally:
    text = finish(proc, log, deadline)
  changes = re.findall(r"elastic Horovod: (\d) -> (\d) ranks \(([^)]*)\), "
                       r"resuming at step (\d+)", text)
  assert [c[:2] for c in changes] == [("2", "3"), ("3", "2")], text[-5000:]
  assert changes[0][2] == "the hosts changed"
  assert changes[1][2] == "a rank failed or left"
  result = json.loads(summary.read_text())
  assert result["global_step"] == TRAIN_STEPS and result["workers"] == 2
  assert result["eval"]["accuracy"] >= 0.95, result

  records = _records(record)
  starts = [i for i, r in enumerate(records) if r["event"] == "start"]
  # Each change starts a session at the resumed step: the first at 0, one
  # per change, and the final evaluation segment's none (one segment).
  assert len(starts) == 3, records
  segments = [records[a:b] for a, b in zip(starts, starts[1:] + [None])]
  for i, segment in enumerate(segments):
    begin, updates = segment[0], segment[1:]
    # Consecutive updates from the step restored, none skipped or repeated.
    assert [u["step"] for u in updates] == list(
        range(begin["step"] + 1, begin["step"] + 1 + len(updates))), segment
    size = updates[0]["size"]
    assert {u["scale"] for u in updates} == {size * ACCUMULATION}, segment
    if i == 0:
      assert begin["step"] == 0 and begin["tau"] == 0
      continue
    before = segments[i - 1][1:]
    resumed = begin["step"]
    # The last commit: the latest multiple of COMMIT (from where the
    # previous segment started) that the previous segment reached.
    assert resumed % COMMIT == 0, (resumed, before[-1])
    assert before[-1]["step"] - COMMIT < resumed <= before[-1]["step"]
    if changes[i - 1][2] == "the hosts changed":  # at a commit: nothing lost
      assert resumed == before[-1]["step"], (resumed, before[-1])
    # tau carries exactly: the restored value is the one after that update.
    [at_commit] = [u for u in before if u["step"] == resumed]
    assert begin["tau"] == at_commit["tau"], (begin, at_commit)
    assert changes[i - 1][3] == str(resumed)
  assert [s[1]["size"] for s in segments] == [2, 3, 2]
  assert segments[-1][-1]["step"] == TRAIN_STEPS
  print(f"elastic job: {time.monotonic() - start:.0f} s, changes {changes}")
  assert_no_job_processes_within((host1, host3), 30)


def test_a_size_that_cannot_hold_the_global_batch_is_refused_at_the_change(
    cluster, tmp_path):
  host1, _, _ = cluster(3, loopback_hostname=True).hosts
  # 128 examples a update, 4 micro-batches of 32: 2 ranks hold it, 3 cannot.
  proc, log, hosts = _start(host1, tmp_path, "--train_steps=100000",
                            "--elastic_batch=hold")
  try:
    deadline = time.monotonic() + 180
    waiting.wait_for(lambda: checkpoint_step(tmp_path / "model") >= COMMIT,
                     f"commit at step {COMMIT}", deadline, proc=proc, log=log,
                     traceback_fails=True)
    hosts.write_text("host1:1\nhost2:1\nhost3:1\n")
    proc.wait(timeout=max(1, deadline - time.monotonic()))
  finally:
    if proc.poll() is None:
      proc.kill()
  text = log.read_text()
  assert proc.returncode != 0, text[-5000:]
  lines = {l.split(":", 1)[1] for l in text.splitlines()
           if "estimator-scale: error:" in l}
  assert lines == {
      "estimator-scale: error: --elastic_batch='hold' cannot keep "
      "--global_batch_size=128 on 3 ranks: an update is 4 micro-batches of "
      "32 examples, which 3 ranks cannot share evenly (sizes that can: 1, 2, "
      "4); use --elastic_batch='scale' to let the global batch follow the "
      "size"}, text[-5000:]
  assert "<stderr>:Traceback" not in text, text[-5000:]  # horovodrun's own stays

"""The example ids a job trained on, update by update, and the check that
each example of the epoch was trained once.

The models of tests/workers/tiny_models put each replica's batch of ids in
the `example_ids` collection; `IdsHook` fetches them with every update. It
lives apart from the worker programs because those define absl flags when
imported, which an in-process test must not do.
"""
import collections
import glob
import json
import os
import time

import numpy as np
import tensorflow as tf


class IdsHook(tf.compat.v1.train.SessionRunHook):
  """Records, per update, the ids this process trained on (every replica's).

  Attributes:
    records: one dict per update: `step` (global_step after it), `ids`,
      `began` (when the session started), `start` (the step it resumed
      from) and `time` (when the update ended), with the `labels` given.
    seen: every id of every update, in order.
  """

  def __init__(self, path=None, **labels):
    """Args:
      path: a JSON-lines file each update is appended to at once, so a
        process killed mid-run leaves what it trained; None: memory only.
      **labels: added to every record (the worker's index, the job's size).
    """
    self._path = path
    self._labels = labels
    self.records = []

  @property
  def seen(self):
    return [i for record in self.records for i in record["ids"]]

  def begin(self):
    self._ids = tf.compat.v1.get_collection("example_ids")
    self._global_step = tf.compat.v1.train.get_global_step()

  def after_create_session(self, session, coord):
    del coord
    self._began = time.time()
    self._start = int(session.run(self._global_step))

  def before_run(self, run_context):
    return tf.compat.v1.train.SessionRunArgs(self._ids)

  def after_run(self, run_context, run_values):
    # Read after the update: fetched beside the train op, the step could be
    # the value before or after its increment.
    step = int(run_context.session.run(self._global_step))
    ids = [i for batch in run_values.results
           for i in np.asarray(batch).reshape(-1).tolist()]
    record = dict(self._labels, step=step, ids=ids, began=self._began,
                  start=self._start, time=time.time())
    self.records.append(record)
    if self._path:
      with open(self._path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def read(out_dir, run="*"):
  """The records every process of `run` wrote under out_dir."""
  records = []
  for path in sorted(glob.glob(os.path.join(out_dir, f"ids-{run}-*.jsonl"))):
    with open(path, encoding="utf-8") as f:
      records += [json.loads(line) for line in f]
  return records


def trained(out_dir, run="*"):
  """Every id `run`'s processes trained on, over all of its updates."""
  return [i for record in read(out_dir, run) for i in record["ids"]]


def _segments(records):
  """[(start step, size, {step: {worker: ids}})] per session (a run, a
  restart, an elastic change: a start step and a size), in the order the
  sessions began."""
  sessions = collections.defaultdict(lambda: collections.defaultdict(dict))
  began = {}
  for record in records:
    key = (record["start"], record["size"])
    sessions[key][record["step"]][record["worker"]] = record["ids"]
    began[key] = min(began.get(key, record["began"]), record["began"])
  return [(start, size, dict(sessions[(start, size)]))
          for start, size in sorted(sessions, key=began.get)]


def miscounted(stream, examples):
  """How many ids of `stream` (the kept updates' ids, in order) break "each
  example once an epoch": in each whole epoch of `examples` ids, those
  trained twice or never; in the epoch begun at the end, those twice."""
  wrong = 0
  for begin in range(0, len(stream), examples):
    counts = collections.Counter(stream[begin:begin + examples])
    wrong += sum(n - 1 for n in counts.values())
    if begin + examples <= len(stream):
      wrong += sum(1 for i in range(examples) if i not in counts)
  return wrong


def kept_ids(records):
  """(the ids of the updates the job kept, in order; those it trained again;
  [(start step, size, step resumed from, ids lost)] per session but the
  last), asserting that each session's kept updates have every worker's ids
  and that a session resumed with the updates its predecessor lost."""
  segments = _segments(records)
  stream, again, report, replays = [], [], [], []
  for n, (start, size, steps) in enumerate(segments):
    resumed = segments[n + 1][0] if n + 1 < len(segments) else None
    lost, whole = [], []
    for step in sorted(steps):
      workers = steps[step]
      ids = [i for w in sorted(workers) for i in workers[w]]
      if resumed is None or step <= resumed:
        assert len(workers) == size, (start, size, step, sorted(workers))
        stream += ids
        continue
      lost += ids
      if len(workers) == size:  # not the update a kill cut short
        whole += ids
    if resumed is None:
      continue
    assert max(steps) >= resumed, (start, size, max(steps), resumed)
    again += lost
    report.append((start, size, resumed, lost))
    replays.append((len(stream), resumed, whole))
  # The rest of the epoch from the commit on is the same sequence on any
  # number of workers: the lost updates' examples come next in what the job
  # kept, though the session after may itself end before it has trained
  # them all, and the one after it go on with them.
  for at, resumed, whole in replays:
    kept = stream[at:at + len(whole)]
    assert kept == whole, (resumed, len(whole), len(kept),
                           next((k for k, (a, b) in enumerate(zip(whole, kept))
                                 if a != b), None))
  return stream, again, report


def check_each_once(records, examples):
  """Asserts that `records` (of every worker of a job with restarts or
  elastic changes) trained each of `examples` ids once an epoch, except
  the updates each restart lost: those after the checkpoint (commit) it
  resumed from were trained again, and with them their examples, once more.

  Returns:
    [(start step, size, step resumed from, ids lost)] per session but the
    last: the ids its workers trained after the step the next resumed from.
  """
  stream, again, report = kept_ids(records)
  assert len(stream) >= examples, (len(stream), examples)
  assert miscounted(stream, examples) == 0, stream
  everything = collections.Counter(i for r in records for i in r["ids"])
  assert everything == collections.Counter(stream) + collections.Counter(
      again)
  return report


class Pause(tf.compat.v1.train.SessionRunHook):
  """Sleeps after each update, so that a test can kill a job mid-way."""

  def __init__(self, seconds):
    self._seconds = seconds

  def after_run(self, run_context, run_values):
    time.sleep(self._seconds)


def day_hooks(ids):
  """The hooks a days test's model adds, as its environment asks: with
  DAY_IDS_FILE, an `IdsHook` appending `ids` (put in the `example_ids`
  collection) there; with DAY_SECONDS_PER_UPDATE, a `Pause`."""
  tf.compat.v1.add_to_collection("example_ids", ids)
  hooks = []
  if os.environ.get("DAY_IDS_FILE"):
    hooks.append(IdsHook(os.environ["DAY_IDS_FILE"], worker=0, size=1))
  if float(os.environ.get("DAY_SECONDS_PER_UPDATE") or 0):
    hooks.append(Pause(float(os.environ["DAY_SECONDS_PER_UPDATE"])))
  return hooks

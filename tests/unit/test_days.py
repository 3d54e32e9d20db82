"""Dated partitions (inputs/days.py), a day read once (a span of
`input_fn.Plan`) and the summary per day (day_summary.py), in process.

The command line over days, killed and resumed, is
tests/integration/test_days_cli.py.
"""
import datetime
import json
import os
import threading
import types

import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale import by_day
from estimator_scale import day_summary
from estimator_scale import errors
from estimator_scale import topology
from estimator_scale.inputs import days
from estimator_scale.inputs import input_fn
from estimator_scale.inputs import position
from tests.helpers import day_logs
from tests.workers import day_clicks

_DAY = datetime.date(2026, 1, 1)


def test_a_range_of_days_in_each_form():
  assert days.parse_range("2026-01-01:2026-01-03") == (
      _DAY, datetime.date(2026, 1, 3))
  assert days.parse_range("2026-01-01") == (_DAY, _DAY)
  assert days.parse_range("2026-01-01:") == (_DAY, None)


@pytest.mark.parametrize("text,says", [
    ("2026-01-01..2026-01-03", "is not a range of days; valid: YYYY-MM-DD:"),
    ("2026-02-30", "is not a range of days"),
    ("", "is not a range of days"),
    ("2026-01-03:2026-01-01", "the last day comes before the first; valid: "
                              "2026-01-03:2026-01-03 or later")])
def test_a_malformed_range_names_the_argument_and_the_valid_forms(text, says):
  with pytest.raises(errors.ConfigError, match="days=") as raised:
    days.parse_range(text)
  assert says in str(raised.value)


def test_day_folders_with_markers_and_files_named_with_a_date(tmp_path):
  day_logs.write_days(str(tmp_path), _DAY, [3, 3])
  day_logs.write_day(str(tmp_path), "2026-01-03", 3, 3, success=False)
  (tmp_path / "clicks-2026-01-05.tfrecord").write_bytes(b"")
  (tmp_path / "_temporary").mkdir()
  found = days.partitions(str(tmp_path))
  assert sorted(str(day) for day in found) == [
      "2026-01-01", "2026-01-02", "2026-01-03", "2026-01-05"]
  assert [found[day].landed for day in sorted(found)] == [
      True, True, False, True]
  first = found[_DAY]
  assert [os.path.basename(f) for f in first.files] == [
      "data-00000-of-00002.tfrecord", "data-00001-of-00002.tfrecord"]
  assert days.landed(str(tmp_path), datetime.date(2026, 1, 3)) is None


def test_folders_without_any_marker_are_complete(tmp_path):
  day_logs.write_days(str(tmp_path), _DAY, [3], success=False)
  assert days.partitions(str(tmp_path))[_DAY].landed


def test_a_root_without_days_names_the_argument_and_the_layouts(tmp_path):
  (tmp_path / "part-0.tfrecord").write_bytes(b"")
  with pytest.raises(errors.ConfigError,
                     match=r"train_data=.* holds no dated partitions: want "
                           r"folders day=YYYY-MM-DD/"):
    days.partitions(str(tmp_path))
  with pytest.raises(errors.ConfigError, match="no such directory"):
    days.partitions(str(tmp_path / "absent"))


def test_a_missing_day_without_follow_is_refused_naming_what_is_there(
    tmp_path):
  day_logs.write_days(str(tmp_path), _DAY, [3, 3])
  last = datetime.date(2026, 1, 3)
  with pytest.raises(errors.ConfigError) as raised:
    days.check_days(str(tmp_path), _DAY, last, follow=False)
  assert ("no complete partition for the day(s) 2026-01-03 of days="
          "2026-01-01:2026-01-03; it holds 2026-01-01..2026-01-02") in str(
              raised.value)
  assert "follow=True" in str(raised.value)
  days.check_days(str(tmp_path), _DAY, last, follow=True)
  with pytest.raises(errors.ConfigError, match="needs follow=True"):
    days.check_days(str(tmp_path), _DAY, None, follow=False)


def test_a_wait_ends_when_the_day_lands_or_at_its_timeout(tmp_path,
                                                          monkeypatch):
  monkeypatch.setattr(days, "POLL_SECS", 0.05)
  day_logs.write_days(str(tmp_path), _DAY, [3])
  day_logs.write_day(str(tmp_path), "2026-01-02", 2, 3, success=False)
  second = datetime.date(2026, 1, 2)
  assert days.wait_for(str(tmp_path), second, 0.2) is None
  later = threading.Timer(0.3, day_logs.mark_landed,
                          (str(tmp_path), "2026-01-02"))
  later.start()
  assert days.wait_for(str(tmp_path), second, 30).day == second
  later.join()


@pytest.mark.parametrize("records,divisor,examples,updates", [
    (43, 1, 43, 6), (40, 1, 40, 5), (43, 2, 42, 6), (41, 4, 40, 5),
    (35, 4, 32, 4)])
def test_a_days_span_keeps_what_its_last_update_can_split(
    records, divisor, examples, updates):
  span = days.span(10, records, 8, divisor)
  assert (span.start_step, span.records, span.examples) == (
      10, records, examples)
  assert days.updates(span, 8) == updates


def _read(span, step, workers, index, monkeypatch, replica_batch=None):
  """What worker `index` of `workers` reads of `span` from `step` on."""
  monkeypatch.setattr(position.coordinator_lib, "checkpoint_step",
                      lambda model_dir: step)
  plan = input_fn.Plan("day", 8, True, 3, 5, lambda rows: rows,
                       parse_batches=True, count=span.records, span=span)
  dataset = input_fn.read(plan, topology.Topology(), replica_batch or
                          8 // workers, tf.distribute.InputContext(
                              workers, index), "model_dir")
  return [batch.numpy().tolist() for batch in dataset]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_span_is_read_once_from_any_step_on_any_worker_count(
    workers, monkeypatch):
  span = position.Span(start_step=4, records=22, examples=22)
  whole = _read(span, 4, 1, 0, monkeypatch)
  assert [len(batch) for batch in whole] == [8, 8, 6]
  assert sorted(sum(whole, [])) == list(range(22))
  for step in (5, 6):
    shares = [_read(span, step, workers, w, monkeypatch)
              for w in range(workers)]
    updates = [sum(parts, []) for parts in zip(*shares)]
    assert updates == whole[step - 4:]
  assert _read(span, 7, workers, 0, monkeypatch) == []


def test_a_short_last_update_splits_over_each_workers_replicas(monkeypatch):
  span = position.Span(start_step=0, records=21, examples=20)
  batches = _read(span, 2, 2, 1, monkeypatch, replica_batch=2)
  assert [len(batch) for batch in batches] == [1, 1]


def _summary():
  summary = {"days": {}}
  for day, auc in (("2026-01-01", 0.7), ("2026-01-02", 0.8),
                   ("2026-01-03", None)):
    entry = day_summary.entry(summary, day)
    entry.update(examples=40, left_out=0, updates=5, examples_per_sec=812.4,
                 export=f"/e/{day}/1")
    if auc is not None:
      entry.update(eval_day="next", eval={"auc": auc, "loss": 1 - auc})
  return summary


def test_the_best_day_is_named_and_the_summary_rendered(tmp_path):
  summary = _summary()
  day_summary.keep_best(summary, str(tmp_path / "export"), "auc", True)
  best = json.loads((tmp_path / "export" / "best.json").read_text())
  assert best == summary["best"] and best["day"] == "2026-01-02"
  day_summary.keep_best(summary, str(tmp_path / "export"), "loss", False)
  assert summary["best"]["day"] == "2026-01-02"
  day_summary.save(summary, str(tmp_path), "auc")
  assert day_summary.load(str(tmp_path)) == summary
  table = (tmp_path / "days.md").read_text().splitlines()
  assert table[0] == ("| day | examples | left out | updates | examples/s | "
                      "judged on | auc on the next day |")
  assert table[2] == "| 2026-01-01 | 40 | 0 | 5 | 812 | next | 0.7000 |"
  assert table[4].endswith("| - | - |")
  assert (tmp_path / "auc_by_day.png").read_bytes()[:4] == b"\x89PNG"


def test_a_days_start_is_where_it_started_or_where_the_days_end(tmp_path):
  summary = _summary()
  summary["days"]["2026-01-01"].update(start_step=0, end_step=5)
  summary["days"]["2026-01-02"].update(start_step=5, end_step=10)
  assert by_day._first_step(summary, "2026-01-02", str(tmp_path)) == 5
  assert by_day._first_step(summary, "2026-01-04", str(tmp_path)) == 10
  assert by_day._first_step({"days": {}}, "2026-01-01", str(tmp_path)) == 0


class _Exporter:
  """Stands in for an Estimator's export: a numbered SavedModel folder."""

  def __init__(self):
    self.exports = 0

  def export_saved_model(self, base, compact=None):
    self.exports += 1
    path = os.path.join(base, str(self.exports))
    os.makedirs(path)
    open(os.path.join(path, "saved_model.pb"), "wb").close()
    return path.encode()


def test_a_day_is_exported_once_and_an_export_cut_short_is_not_kept(
    tmp_path):
  cut = tmp_path / "2026-01-01" / "temp-5"
  cut.mkdir(parents=True)
  (cut / "saved_model.pb").write_bytes(b"")
  exporter = _Exporter()
  path = by_day._export(exporter, str(tmp_path), _DAY, None)
  assert path == str(tmp_path / "2026-01-01" / "1")
  assert by_day._export(exporter, str(tmp_path), _DAY, None) == path
  assert exporter.exports == 1


def test_resuming_days_with_another_global_batch_is_refused(tmp_path):
  estimator = types.SimpleNamespace(
      model=object(), model_dir=str(tmp_path),
      topology=types.SimpleNamespace(synchronous=True))
  by_day._check(estimator, 8, {"days": {}, "global_batch_size": 8})
  with pytest.raises(errors.ConfigError,
                     match=r"global_batch_size=16: .* trained its days with "
                           r"global_batch_size=8"):
    by_day._check(estimator, 16, {"days": {}, "global_batch_size": 8})


class _Judged(_Exporter):
  """Stands in for an Estimator that trains nothing and judges every day
  the same."""

  def __init__(self, model_dir):
    super().__init__()
    self.model, self.model_dir = object(), model_dir
    self.topology = types.SimpleNamespace(synchronous=True, is_chief=True)

  def files_input_fn(self, files, *unused_args, **unused_kwargs):
    return files

  def evaluate(self, input_fn, steps=None, checkpoint_path=None):
    return {"auc": 0.75, "global_step": 1}


def test_an_open_range_stops_after_one_wait_for_a_day_that_never_lands(
    tmp_path, monkeypatch):
  monkeypatch.setattr(days, "POLL_SECS", 0.05)
  day_logs.write_days(str(tmp_path / "days"), _DAY, [3, 3])
  waits = []
  wait_for = days.wait_for
  monkeypatch.setattr(days, "wait_for", lambda *args: waits.append(
      str(args[1])) or wait_for(*args))
  monkeypatch.setattr(by_day, "_train_day", lambda estimator, partition,
                      start, *args: ({"end_step": start + 1}, False))
  summary = by_day.train_by_day(
      _Judged(str(tmp_path / "model")), str(tmp_path / "days"),
      "2026-01-01:", 8, follow=True, follow_timeout_secs=0.2)
  assert waits == ["2026-01-03"]
  assert [(day, e.get("eval_day")) for day, e in
          sorted(summary["days"].items())] == [
              ("2026-01-01", "2026-01-02"), ("2026-01-02", None)]
  assert summary["best"]["day"] == "2026-01-01"
  assert os.path.isdir(tmp_path / "model" / "export" / "2026-01-02" / "2")


def test_a_day_whose_checkpoint_is_gone_when_its_next_day_lands_says_so(
    tmp_path, monkeypatch, caplog):
  root, model_dir = str(tmp_path / "days"), tmp_path / "model"
  day_logs.write_days(root, _DAY, [3, 3])
  model_dir.mkdir()
  (model_dir / "days.json").write_text(json.dumps({"days": {"2026-01-01": {
      "start_step": 0, "end_step": 5, "export": "/e/2026-01-01/1"}}}))
  monkeypatch.setattr(by_day, "_train_day", lambda estimator, partition,
                      start, *args: ({"end_step": start + 1}, False))
  caplog.set_level("WARNING")
  summary = by_day.train_by_day(_Judged(str(model_dir)), root,
                                "2026-01-02:2026-01-02", 8)
  first = summary["days"]["2026-01-01"]
  assert "eval_day" not in first
  assert first["not_judged"] == (
      f"its checkpoint {model_dir / 'model.ckpt-5'} was no longer kept "
      "(keep_checkpoint_max) when day 2026-01-02 landed")
  assert day_summary.load(str(model_dir))["days"]["2026-01-01"] == first
  assert any("day 2026-01-01 is not judged on day 2026-01-02" in
             r.getMessage() for r in caplog.records)


def test_a_range_ended_before_its_next_day_is_judged_when_that_day_lands(
    tmp_path, monkeypatch):
  """--days=D1:D3 before D4 lands, then --days=D4: --follow as D4 and D5
  land: D3 is judged on D4 first, by the checkpoint that ended D3."""
  monkeypatch.setattr(days, "POLL_SECS", 0.05)
  for name in ("DAY_IDS_FILE", "DAY_SECONDS_PER_UPDATE"):
    monkeypatch.delenv(name, raising=False)
  root, model_dir = str(tmp_path / "days"), str(tmp_path / "model")
  day_logs.write_days(root, _DAY, [8, 8, 8])
  for number, name in ((4, "2026-01-04"), (5, "2026-01-05")):
    day_logs.write_day(root, name, number, 8, success=False)
  make = lambda: es.make_estimator(day_clicks.DayClicks(), model_dir=model_dir,
                                   distribution="none", global_batch_size=8)
  by_day.train_by_day(make(), root, "2026-01-01:2026-01-03", 8)
  assert "eval_day" not in day_summary.load(model_dir)["days"]["2026-01-03"]
  later = threading.Timer(0.3, lambda: [day_logs.mark_landed(root, name)
                                        for name in ("2026-01-04",
                                                     "2026-01-05")])
  later.start()
  by_day.train_by_day(make(), root, "2026-01-04:", 8, follow=True,
                      follow_timeout_secs=2)
  later.join()
  entries = day_summary.load(model_dir)["days"]
  third = entries["2026-01-03"]
  assert third["eval_day"] == "2026-01-04" and "auc" in third["eval"]
  assert third["eval"]["global_step"] == third["end_step"]  # not day 4's
  assert entries["2026-01-04"]["eval_day"] == "2026-01-05"


class _DayIds(es.BinaryClassifierModel):
  """day_logs' examples with a dynamic table over their ids, which are new
  every day: day 1 fills the table, day 2 evicts to admit its own."""

  name = "day_ids_test"
  CAPACITY = 32

  def logits(self, features, training, params):
    rows = es.dynamic_embedding(features["id"], 2, self.CAPACITY, name="ids")
    return tf.keras.layers.Dense(1)(
        tf.concat([features["x"], rows], axis=1))

  def serving_features(self):
    return {"x": tf.TensorSpec([4], tf.float32),
            "id": tf.TensorSpec([], tf.int64)}

  def feature_spec(self):
    spec = super().feature_spec()
    spec["id"] = tf.io.FixedLenFeature([], tf.int64)
    return spec


def test_each_days_summary_says_what_its_tables_admitted_and_evicted(
    tmp_path):
  root = str(tmp_path / "days")
  day_logs.write_days(root, _DAY, [24, 40, 16])
  # The chief's progress hook, which reads the tables, needs the batch.
  estimator = es.make_estimator(_DayIds(), model_dir=str(tmp_path / "model"),
                                distribution="none", global_batch_size=8)
  summary = es.train_by_day(estimator, root, "2026-01-01:2026-01-02", 8)
  (first,), (second,) = (summary["days"][d]["tables"].values()
                         for d in ("2026-01-01", "2026-01-02"))
  # Every id is new, seen once, and admitted on first sight (min_count 1).
  assert first == {"rows": 24, "admitted": 24, "evicted": 0}
  assert second["rows"] == _DayIds.CAPACITY
  assert second["admitted"] == 40
  assert second["evicted"] == 24 + 40 - _DayIds.CAPACITY
  table = day_summary.table(summary)
  assert "| 32 (+40, -32) |" in table, table

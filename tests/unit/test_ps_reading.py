"""Prediction on the ps tasks: the placement holds while its generator
builds and runs, never in the caller's code between two items, and its
container is freed however the caller stops."""
import tensorflow as tf

from estimator_scale.embeddings import ps_reading

_TASK = "/job:worker/task:3"
_FILTERS = ["/job:ps", _TASK]


def _predictions(done, count=3):
  try:
    for i in range(count):
      yield i, ps_reading.active()
  finally:
    done.append("inner closed")


def _read(predictions):
  config = tf.compat.v1.ConfigProto(device_filters=_FILTERS)
  return ps_reading.predictions_on_ps(predictions, 2, _TASK,
                                      "grpc://localhost:1", config)


def _recording(monkeypatch):
  events = []
  monkeypatch.setattr(
      ps_reading, "_reset",
      lambda master, container, filters: events.append(
          (master, container, list(filters))))
  return events


def test_the_placement_holds_inside_the_predictions_only(monkeypatch):
  events = _recording(monkeypatch)
  seen = [(item, inside, ps_reading.active())
          for item, inside in _read(_predictions(events))]
  assert seen == [(0, True, False), (1, True, False), (2, True, False)]
  closed, (master, container, filters) = events
  assert closed == "inner closed"  # its session ends before the reset
  assert master == "grpc://localhost:1" and filters == _FILTERS
  # Named for the task: two hosts' processes may share a pid.
  assert container.startswith("evaluation-worker-3-"), container


def test_a_prediction_stopped_early_frees_its_container(monkeypatch):
  events = _recording(monkeypatch)
  reading = _read(_predictions(events, count=10))
  assert next(reading) == (0, True)
  reading.close()
  assert [e if isinstance(e, str) else e[0] for e in events] == [
      "inner closed", "grpc://localhost:1"]
  assert not ps_reading.active()

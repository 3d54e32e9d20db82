"""The exactly-once checker the multi-process and chaos tests share
(tests/helpers/trained_ids.py), on hand-made records: a session that
resumes after lost updates may itself end before it has trained them all
again, and the session after it goes on with them (elastic Horovod's hour
of chaos did that: a 4-rank session lost 10 updates, the 2-rank session
after it was cut 10 updates in, a third finished the replay)."""
import pytest

from tests.helpers import trained_ids


def _session(start, size, began, steps):
  """Records of one session: `steps` {step: [ids of worker 0, 1, ...]}."""
  return [dict(worker=w, size=size, start=start, step=step, ids=ids,
               began=began, time=began + step)
          for step, per_worker in steps.items()
          for w, ids in enumerate(per_worker)]


def _job(replayed):
  # 12 examples; 4 a step on 2 workers, then 2 a step (the size halved its
  # batch). The first session's step 3 is lost (the commit was at 2).
  return (_session(0, 2, 0, {1: [[0, 1], [2, 3]], 2: [[4, 5], [6, 7]],
                             3: [[8, 9], [10, 11]]}) +
          _session(2, 2, 100, {3: [[8], [9]]}) +
          _session(3, 2, 200, {4: [[replayed], [11]], 5: [[0], [1]]}))


def test_a_replay_that_spans_two_sessions_counts_each_example_once():
  assert len(trained_ids.check_each_once(_job(replayed=10), 12)) == 2


def test_a_replay_out_of_order_is_caught():
  with pytest.raises(AssertionError):
    trained_ids.check_each_once(_job(replayed=0), 12)

"""What a rank keeps of the rows it receives when a dynamic table re-shards.

The move itself (rows to their owners over 3 and 2 Horovod ranks, and an
elastic job that grows) is tests/integration/test_dynamic_embedding_
multiprocess.py and test_sharded_elastic.py; here, in one process, the
choice a rank makes when it owns more ids than its rows hold.
"""
import types

import numpy as np
import tensorflow as tf

from estimator_scale.embeddings import dynamic_reshard


def _kept(rows, ids, scores):
  table = types.SimpleNamespace(rows=rows)
  return dynamic_reshard._keep(  # pylint: disable=protected-access
      table, tf.constant(ids, tf.int64), tf.constant(scores, tf.int64)).numpy()


def test_rows_that_fit_are_all_kept_in_the_order_received():
  np.testing.assert_array_equal(_kept(4, [7, 3, 9], [1, 5, 2]), [0, 1, 2])


def test_a_rank_owning_more_ids_than_its_rows_keeps_the_policys_first():
  # Scores are last updates (lru) or counts (lfu): the highest stay.
  np.testing.assert_array_equal(
      _kept(3, [7, 3, 9, 4, 8], [10, 50, 20, 40, 30]), [1, 3, 4])


def test_a_checkpoint_that_does_not_say_its_ranks_reads_none(tmp_path):
  with tf.Graph().as_default(), tf.compat.v1.Session() as session:
    variable = tf.compat.v1.get_variable("v", initializer=[1.0])
    session.run(variable.initializer)
    path = tf.compat.v1.train.Saver([variable]).save(session,
                                                     str(tmp_path / "c"))
  assert dynamic_reshard.ranks_saved(path) is None

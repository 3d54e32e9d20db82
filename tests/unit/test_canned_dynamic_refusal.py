"""What a canned optimizer refuses of the tables split over Horovod ranks,
in one line naming the table, why and what trains it.

A dynamic table's part on a rank trains with the canned optimizer's
default rules (tests/integration/test_dynamic_canned_horovod.py), but
AdaScale and accumulation would read the rank's gradient of its rows
before the exchange brings it there. A part here is what the table makes
on rank 0 of 2, without Horovod running.
"""
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale import canned
from estimator_scale.embeddings import dynamic

_OPTIONS = dynamic.Options(dimension=4, capacity=8)


def _plan(**settings):
  topology = es.build_run_config("none").topology
  return es.canned_optimizer("Adagrad", topology, **settings).plan


def _check(params, plan):
  canned._check_tables(params, plan)  # pylint: disable=protected-access


def _rank_part():
  return dynamic.Table("user_embedding", _OPTIONS, shard=(0, 2)).pool


@pytest.mark.parametrize("settings,named", [
    (dict(lr_scaling="adascale"), "lr_scaling='adascale'"),
    (dict(accumulation_steps=2), "accumulation_steps=2")])
def test_a_dynamic_tables_part_is_named_as_dynamic(settings, named):
  with tf.Graph().as_default():
    part = _rank_part()
    with pytest.raises(es.errors.UsageError) as raised:
      _check([part], _plan(**settings))
  message = str(raised.value)
  assert message == (
      "a canned estimator cannot train the dynamic table user_embedding "
      f"(es.dynamic_embedding_column) on Horovod ranks with {named}: each "
      "rank's gradient of its rows is known only after the ranks exchange "
      "them, and the canned optimizer reads it before; use another "
      "lr_scaling with accumulation_steps=1, or the dynamic column in a "
      "model of your own (es.BaseModel or a model_fn with "
      "es.build_train_op), or one process")
  assert "sharded_embedding_column" not in message


def test_a_dynamic_tables_part_trains_with_the_default_rules():
  with tf.Graph().as_default():
    _check([_rank_part()], _plan(lr_scaling="linear"))


def test_a_whole_dynamic_table_is_not_refused():
  with tf.Graph().as_default():
    pool = dynamic.Table("user_embedding", _OPTIONS).pool
    _check([pool], _plan(lr_scaling="adascale", accumulation_steps=2))

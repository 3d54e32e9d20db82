"""tools/bench/network/embedding_model.py's byte counts and times on numbers
worked by hand: the embedding bench's predictions and the rule for when to
shard a table rest on them."""
import pytest

from tools.bench.network import embedding_model as em
from tools.bench.network import scaling_model as sm

D = 32
ROW = D * 4 + em.ID_BYTES  # a float32 row and its int64 id


def test_replicated_rows_are_forwarded_to_every_other_rank():
  assert em.bytes_sent("replicated", 1000, D, 2) == 1000 * ROW
  assert em.bytes_sent("replicated", 1000, D, 4) == 3 * 1000 * ROW
  assert em.bytes_sent("replicated", 1000, D, 1) == 0


def test_replicated_goes_dense_once_the_ranks_gather_more_than_the_table():
  # 4 ranks x 1000 ids > 3000 rows: a ring allreduce of the table and its
  # per-row counts.
  assert em.bytes_sent("replicated", 1000, D, 4, table_rows=3000) == (
      pytest.approx(1.5 * 3000 * (D + 1) * 4))
  assert em.bytes_sent("replicated", 1000, D, 4, table_rows=4000) == (
      3 * 1000 * ROW)


def test_sharded_sends_ids_and_rows_twice_to_the_other_ranks():
  assert em.bytes_sent("sharded", 1000, D, 4) == pytest.approx(
      0.75 * 1000 * (8 + 2 * D * 4))
  fp16 = em.bytes_sent("sharded", 1000, D, 4, wire_value_bytes=2)
  assert fp16 == pytest.approx(0.75 * 1000 * (8 + 2 * D * 2))
  # N/2-ish fewer bytes than replicated on many hosts.
  ratio = (em.bytes_sent("replicated", 1000, D, 32) /
           em.bytes_sent("sharded", 1000, D, 32))
  assert ratio == pytest.approx(32 * ROW / (8 + 8 * D))


def test_a_parameter_server_worker_sends_what_it_looks_up_whatever_the_size():
  assert em.bytes_sent("parameter_server", 1000, D, 1) == 1000 * (16 + 4 * D)
  assert em.bytes_sent("parameter_server", 1000, D, 64) == 1000 * (16 + 4 * D)


def test_sharding_pays_two_more_exchanges_and_wins_on_bytes_past_a_count():
  link = sm.Link(bandwidth=10e6, latency=1e-4)
  recipe = sm.Recipe(cycle_s=0.005, overhead_s=0.001)
  fixed = 0.0025 + 0.001 + sm.ring_seconds(0, 4, link) + 3 * 1e-4
  assert em.exchange_seconds("sharded", 100, D, 4, link, recipe) == (
      pytest.approx(em.bytes_sent("sharded", 100, D, 4) / 10e6 + 3 * fixed))
  assert em.exchange_seconds("replicated", 100, D, 4, link, recipe) == (
      pytest.approx(3 * 100 * ROW / 10e6 + 3e-4))
  even = em.break_even_ids(D, 4, link, recipe)
  assert even is not None
  for ids, sharded_faster in ((even // 2, False), (even * 2, True)):
    assert (em.exchange_seconds("sharded", ids, D, 4, link, recipe) <
            em.exchange_seconds("replicated", ids, D, 4, link, recipe)) == (
                sharded_faster)


def test_bad_inputs_name_the_argument():
  with pytest.raises(ValueError, match="placement='mirrored'"):
    em.bytes_sent("mirrored", 10, D, 2)
  with pytest.raises(ValueError, match="dimension=0"):
    em.bytes_sent("sharded", 10, 0, 2)
  with pytest.raises(ValueError, match="placement='parameter_server'"):
    em.exchange_seconds("parameter_server", 10, D, 2, sm.Link(1e6, 0))


def test_the_command_line_prints_the_table_and_the_break_even(capsys):
  em.main(["--ids=256,4096", "--hosts=2,8", "--gbits=0.1"])
  out = capsys.readouterr().out
  assert "| 0.1 Gbit/s | 8 | 4096 |" in out
  assert "0.1 Gbit/s, 8 hosts: sharding's exchange is faster from" in out

"""A rank holds its share of a sharded table: 2^22 x 32 with Adam, on 2
hosts x 2 ranks of the rig.

Each rank's peak resident memory (VmHWM), over the whole job (initialising,
updating, saving and merging the shards' checkpoint), above that of a rank
of the same job with a tiny table, must be at most 1.25 x (table + Adam's
two slots) / 4.
"""
import json

from tests.helpers.processes import ROOT
from tests.helpers.rig import ENV, HOROVODRUN_GLOO, PYTHON

ROWS = 1 << 22
DIMENSION = 32
RANKS = 4


def _peaks(host1, tmp_path, rows):
  """Each rank's figures (tests/workers/sharded_capacity.py) for a job of
  2 ranks on each host with a table of `rows`."""
  out = tmp_path / f"rows{rows}"
  proc = host1.run(
      [*HOROVODRUN_GLOO, "-np", str(RANKS), "-H", "host1:2,host2:2",
       PYTHON, "-m", "tests.workers.sharded_capacity", f"--out_dir={out}",
       f"--model_dir={tmp_path / f'model{rows}'}", f"--rows={rows}",
       f"--dimension={DIMENSION}"], cwd=ROOT, env=ENV, timeout=400)
  assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
  return [json.loads((out / f"rank{r}.json").read_text())
          for r in range(RANKS)]


def test_each_rank_holds_a_quarter_of_the_table_and_its_adam_slots(
    cluster, tmp_path):
  host1, _ = cluster(2, loopback_hostname=True).hosts
  without = _peaks(host1, tmp_path, 1024)
  with_table = _peaks(host1, tmp_path, ROWS)
  share = 3 * ROWS * DIMENSION * 4 / RANKS  # the table, m and v
  assert sorted(p["host"] for p in with_table) == [
      "host1", "host1", "host2", "host2"]
  for rank, (base, peaks) in enumerate(zip(without, with_table)):
    assert peaks["shard_bytes"] * RANKS == ROWS * DIMENSION * 4
    above = peaks["after_training"] - base["after_training"]
    print(f"rank {rank}: {above / share:.3f} x its share")
    assert above >= 0.9 * share, (rank, above)  # the table was there
    assert above <= 1.25 * share, (
        f"rank {rank}: peak {above / 2**20:.0f} MiB above a rank without "
        f"the table, over 1.25 x its share of {share / 2**20:.0f} MiB; "
        f"{peaks}")

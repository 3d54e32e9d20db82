"""The compact-export bench's own arithmetic: its AUC from ranks, and its
reading of the size line an export logs (the rows it reports come from
that line, so a change of the line's wording must fail here, not print
a page of wrong rows)."""
import logging
import types

import numpy as np

from estimator_scale.embeddings import compact
from tools.bench import compact_export


def test_auc_from_ranks_counts_every_pair_and_a_tie_as_half():
  labels = np.array([0, 1, 0, 1, 1, 0, 0])
  scores = np.array([0.1, 0.4, 0.4, 0.9, 0.2, 0.2, 0.05])
  positive, negative = scores[labels == 1], scores[labels == 0]
  pairs = [(p > n) + 0.5 * (p == n) for p in positive for n in negative]
  assert compact_export.auc(labels, scores) == sum(pairs) / len(pairs)


def _table(name, kept, capacity, dtype):
  table = types.SimpleNamespace(name=name, positions=np.arange(kept),
                                capacity=capacity, dtype=dtype)
  table.describe = lambda: compact.ServedTable.describe(table)
  return table


def test_the_size_line_an_export_logs_gives_its_rows(caplog):
  few = [_table("a", 1200, 4096, "int8"), _table("b", 34, 64, "int8")]
  many = [_table(f"t{i}", 1000, 2048, "float16") for i in range(5)]
  with caplog.at_level(logging.INFO):
    compact.check_size(123456, "/m/model.ckpt-9", few)
    compact.check_size(2_000_000, "/m/model.ckpt-9", many)
    compact.check_size(777, "/m/model.ckpt-9", [])
  lines = [r.getMessage() for r in caplog.records
           if "of variables to write" in r.getMessage()]
  assert [compact_export.parse_size_line(line) for line in lines] == [
      {"bytes": 123456, "kept": 1234, "capacity": 4160, "dtype": "int8"},
      {"bytes": 2_000_000, "kept": 5000, "capacity": 10240,
       "dtype": "float16"},
      {"bytes": 777, "kept": None, "capacity": None, "dtype": None}]

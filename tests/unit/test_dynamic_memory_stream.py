"""The memory bench's stream of ids: drawn a batch at a time, so the bytes
per id it reports are the table's and not the stream's."""
import numpy as np

from model_zoo import click_data
from tools.bench.dynamic import worker


def test_drawn_slices_are_the_ids_of_their_ranks():
  drawn = worker._Drawn("C1", 100)  # pylint: disable=protected-access
  ranks = np.arange(100, dtype=np.int64)
  whole = click_data.raw_id("C1", ranks)
  assert len(drawn) == 100
  np.testing.assert_array_equal(drawn[0:100], whole)
  np.testing.assert_array_equal(drawn[40:60], whole[40:60])
  # Past the end, as an array's slice is.
  np.testing.assert_array_equal(drawn[90:120], whole[90:])


def test_drawn_labels_are_one_bit_of_another_column():
  labels = worker._Drawn("C2", 50, mask=1)  # pylint: disable=protected-access
  expected = click_data.raw_id("C2", np.arange(50, dtype=np.int64)) & 1
  np.testing.assert_array_equal(labels[0:50], expected)
  assert set(np.unique(labels[0:50])) <= {0, 1}

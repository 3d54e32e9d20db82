"""The zoo's wide_deep, recording the ids it trains on, for
--model_module=tests.workers.wide_deep_ids --model=wide_deep_ids.

The days `tools.click_logs --days` writes carry an `id` per row, which
wide_deep does not read; this model reads it too and hands it to
`trained_ids.day_hooks`, so a test counts each example's updates across
kills with the zoo's own network and parse spec, over a few of the
columns (`COLUMNS`, tests/helpers/click_columns.py): every day builds its
graphs anew (train, evaluate, export).
"""
import tensorflow as tf

import estimator_scale as es
from model_zoo import click_data
from model_zoo import wide_deep
from tests.helpers import click_columns
from tests.helpers import trained_ids
from tools import click_days


COLUMNS = click_data.INFORMATIVE_NUMERIC[:2] + (
    click_data.INFORMATIVE_CATEGORICAL[:2])
"""The columns the network reads: informative ones, numeric and ids."""


@es.register
class WideDeepIds(wide_deep.WideDeep):
  """wide_deep whose records also hold `id`."""

  name = "wide_deep_ids"

  def logits(self, features, training, params):
    """See base class: wide_deep's network over `COLUMNS` only."""
    return wide_deep.logits(
        features, click_columns.reading(wide_deep.wide_columns(params), COLUMNS),
        click_columns.reading(wide_deep.deep_columns(params), COLUMNS),
        params["hidden_units"])

  def feature_spec(self):
    spec = super().feature_spec()
    spec[click_days.ID] = tf.io.FixedLenFeature([], tf.int64)
    return spec

  def training_hooks(self, features, labels):
    return trained_ids.day_hooks(features[click_days.ID])

"""Fewer of the click logs' columns for tests whose subject is not the model.

Every process of a test job builds and optimises its graphs anew, and a
wide & deep graph over all 40 columns takes several times longer to build
than one over the columns the planted clicks depend on.
"""
from model_zoo import click_data

INFORMATIVE = (click_data.INFORMATIVE_NUMERIC +
               click_data.INFORMATIVE_CATEGORICAL +
               ("_X_".join(click_data.CROSSED),))
"""The columns with an effect on the clicks, and the crossed pair."""


def reading(columns, names=INFORMATIVE):
  """The feature columns of `columns` that read a column of `names`."""
  return [c for c in columns
          if c.name in names or c.name.partition("_")[0] in names]

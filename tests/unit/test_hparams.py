"""--hparams parsing."""
import pytest

from estimator_scale import hparams

DEFAULTS = {"units": [64, 32], "rate": 0.5, "depth": 2, "relu": True,
            "name": "x"}


def test_overrides_keep_types():
  params = hparams.parse(DEFAULTS, "units=8:4, rate=0.1,depth=3,relu=false,name=y")
  assert params == {"units": [8, 4], "rate": 0.1, "depth": 3, "relu": False,
                    "name": "y"}


@pytest.mark.parametrize("text,message", [
    ("rate", "malformed item 'rate'"),
    ("rate=1=2", "malformed"),
    ("=3", "malformed"),
    ("width=3", r"unknown hyperparameter 'width'; valid: depth, name, rate"),
    ("depth=two", "'two' is not a valid int"),
    ("relu=maybe", "not a boolean"),
])
def test_bad_overrides(text, message):
  with pytest.raises(ValueError, match=message):
    hparams.parse(DEFAULTS, text)

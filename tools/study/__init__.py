"""The AdaScale study (`make study`): specs.py says what it runs, runs.py
trains a run, results.py tabulates them and plots.py renders the tables.

Its JSON is in results/; the page and figures it renders are in
docs/adascale/.
"""

"""Examples/sec of parameter servers, synchronous and not, against one process.

`python -m tools.bench.ps_speed` runs it; docs/PS_SPEED.md is its page, which
also shows `python -m tools.datasets.peer speed`'s results.
"""

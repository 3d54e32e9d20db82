"""The two benchmarks: perf/ (`make bench`, docs/BENCH.md) and
network/ (`make bench-network`, docs/NETWORK.md, with the scaling model).

Each owns its `results/` (the JSON its runs write) and a Markdown template
that its renderer fills from that JSON into the page under docs/.
"""

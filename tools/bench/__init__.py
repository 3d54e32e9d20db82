"""The benchmark suite behind docs/PERFORMANCE.md (`make bench`).

  python -m tools.bench --out bench.json --markdown docs/PERFORMANCE.md

variants.py  what runs (VARIANTS, GROUPS) and what each row compares (ROWS)
runner.py    interleaved rounds of fresh processes, their time limits
worker.py    one measurement inside such a process: build, warm up, time
results.py   measurements -> bench.json rows (within-round ratios, medians)
render.py    bench.json -> docs/PERFORMANCE.md
notes.py     the page's prose: why a row can miss, the method, probes
peers/       the hand-written code the framework is measured against

This file imports nothing: worker.py runs in every measured process, and
the peers are imported there through this package.
"""

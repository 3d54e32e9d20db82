"""The benchmark behind docs/BENCH.md (`make bench`).

  python -m tools.bench.perf      # runs, writes results/bench.json and the page

variants.py   what runs (VARIANTS, GROUPS) and what each row compares (ROWS)
runner.py     interleaved rounds of fresh processes, their time limits
worker.py     one measurement inside such a process (kinds.py: what trains,
              timing.py: the hook that times it, windows.py: pauses between
              windows, usage.py: memory and CPU)
results.py    measurements -> bench.json rows (within-round ratios, medians)
render.py     results/bench.json -> docs/BENCH.md through
              BENCH.md.template and explanations.md
horovod_knobs.py  the Horovod settings' section (results/horovod_knobs.json)
peers/        the hand-written code the framework is measured against

This file imports nothing: worker.py runs in every measured process.
"""

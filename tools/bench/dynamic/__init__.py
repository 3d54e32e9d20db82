"""Dynamic embedding tables against hashed ones: AUC, rows, examples/s,
resident memory; `python -m tools.bench.dynamic` (docs/DYNAMIC.md)."""

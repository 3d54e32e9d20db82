"""Memory of parameter-server tasks against their fair share of a table.

`python -m tools.bench.ps_memory` trains `model.OneTable` (one hashed
table, Adam or another optimizer) on a chief, a worker and N ps tasks
through the launcher, reads each ps task's peak resident memory from /proc,
and prints it, less an idle ps task's, beside the fair share: (table +
slots) / N; `phases` says in which phase of the job the memory was held.
"""

"""What a sharded table costs as it grows: step, save, restore, re-shard,
evaluation, export and memory; `python -m tools.bench.table_costs`
(docs/TABLE_COSTS.md), with the billion-id plan those costs imply."""

"""Operators' tools: `doctor` checks, the status snapshot a running gateway keeps, metrics and
health endpoints (docs/operations.md), and the garbage-collector tuning a gateway process starts
with (`ops.gc_tuning`, docs/behaviour.md §12). Nothing here is on a message's path except the
metric counters the pipeline bumps (`ops.metrics`)."""

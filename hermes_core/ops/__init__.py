"""Operators' tools: `doctor` checks, the status snapshot a running gateway keeps, metrics and
health endpoints (docs/operations.md). Nothing here is on a message's path except the
metric counters the pipeline bumps (`ops.metrics`)."""

"""Builtin hook implementations: the core's defaults, registered first and marked `trylast`
so every plugin and deployment override outranks them (docs/architecture.md §3)."""

from . import access, agent_cache_pressure, delivery, fts_maintenance, housekeeping, recovery, redaction, session_keys

BUILTIN_MODULES = (session_keys, access, redaction, delivery, housekeeping, fts_maintenance, recovery, agent_cache_pressure)

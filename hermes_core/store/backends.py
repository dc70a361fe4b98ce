"""Choosing the store engine: `[store] backend` (docs/architecture.md §7).

`sqlite` is built in: `SqliteBackend` on `state.db`, with the degraded fallback of
`SessionStore.open`. Any other name is an entry point of the `hermes_core.store_backends` group,
pointing at a factory `(GatewayConfig) -> StoreBackend` (e.g. `postgres` from
hermes-gateway-postgres). A server engine shared by several gateway replicas has no degraded
fallback: running on a private copy would fork the conversations the other replicas see.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

from ..settings import BUILTIN_STORE
from .backend import StoreBackend
from .db import StoreError

STORE_BACKENDS_GROUP = "hermes_core.store_backends"


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    return list(importlib.metadata.entry_points(group=STORE_BACKENDS_GROUP))


def store_backend_names() -> list[str]:
    """The selectable `[store] backend` names: `sqlite` and the installed entry points, sorted."""
    return sorted({BUILTIN_STORE, *(ep.name for ep in _entry_points())})


def create_store_backend(config: Any) -> StoreBackend:
    """The (not yet open) engine `[store] backend` names, from its entry point's factory.

    Args:
        config: the GatewayConfig; the factory reads `[store]` (`dsn`, `lease_ttl_s`, ...).
    Raises:
        StoreError: the name is `sqlite` (built in, not made here), no installed entry point has
            it, or its factory failed to import or to build the engine; one line naming it.
    """
    name = config.store.backend
    if config.store.builtin:
        raise StoreError("the sqlite store is built in; SessionStore opens it itself")
    found = [ep for ep in _entry_points() if ep.name == name]
    if not found:
        raise StoreError(f"[store] backend = {name!r} is not installed (known: {', '.join(store_backend_names())})")
    if len(found) > 1:
        raise StoreError(f"[store] backend = {name!r} is provided by several entry points: "
                         f"{', '.join(ep.value for ep in found)}")
    try:
        factory = found[0].load()
        return factory(config)
    except StoreError:
        raise
    except Exception as exc:
        raise StoreError(f"[store] backend {name!r} ({found[0].value}) cannot be created: "
                         f"{type(exc).__name__}: {exc}") from exc

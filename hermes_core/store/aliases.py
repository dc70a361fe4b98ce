"""Identity aliases of the session store (docs/behaviour.md §4): the `identity_aliases` table and
its in-memory map.

The whole table is loaded into an `AliasMap` when the store opens, so folding an id into its
canonical form (`resolve_identity`) is a synchronous dictionary walk: the
`hermes_canonical_identity` hook, which is sync by rule, consults it while a session key is built.
Recording writes through to the backend first, then updates the map. Mixed into `SessionStore`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Iterable

from ..model import format_timestamp
from ..model.identity import IdentityAlias

log = logging.getLogger(__name__)

# Longest alias chain followed (a → b → c …); a longer one is cut there and logged, never a loop.
MAX_CHAIN = 16
# `last_seen` of an alias seen again is rewritten at most this often (seconds): aliases arrive
# with every message of a migrated chat, and one write per message would buy nothing.
LAST_SEEN_EVERY_S = 3600.0


class AliasMap:
    """`(platform, alias_id) → canonical_id`, with chains followed (pure, in memory)."""

    def __init__(self) -> None:
        self._map: dict[tuple[str, str], str] = {}

    def __len__(self) -> int:
        return len(self._map)

    def clear(self) -> None:
        """Forget every alias."""
        self._map.clear()

    def direct(self, platform: str, alias_id: str) -> str | None:
        """The canonical id `alias_id` points at directly, or None."""
        return self._map.get((platform, alias_id))

    def set(self, platform: str, alias_id: str, canonical_id: str) -> None:
        """Point `alias_id` at `canonical_id` (no checks; see `would_loop`)."""
        self._map[(platform, alias_id)] = canonical_id

    def resolve(self, platform: str, value: str) -> str:
        """Follow `value`'s aliases to the end of the chain; `value` itself when it has none.
        A chain longer than `MAX_CHAIN` or looping back stops at the last id before the repeat."""
        if (platform, value) not in self._map:
            return value  # no alias (nearly every id): no chain to follow
        seen = {value}
        current = value
        for _ in range(MAX_CHAIN):
            target = self._map.get((platform, current))
            if target is None or target in seen:
                return current
            seen.add(target)
            current = target
        log.warning("identity alias chain on %s longer than %d links; cut", platform, MAX_CHAIN)
        return current

    def would_loop(self, platform: str, alias_id: str, canonical_id: str) -> bool:
        """True when pointing `alias_id` at `canonical_id` would close a loop (the canonical id
        already resolves to the alias)."""
        return self.resolve(platform, canonical_id) == alias_id


class AliasOps:
    """`record_aliases`, `resolve_identity`, `identity_aliases` of the session store.

    Relies on the SessionStore attributes `_b()` and `_now()`, and on `_aliases` (an AliasMap),
    `_alias_lock` (an asyncio.Lock) and `_alias_written` (`{(platform, alias_id): monotonic s}`)
    set in its `__init__`.
    """

    _aliases: AliasMap
    _alias_lock: asyncio.Lock
    _alias_written: dict[tuple[str, str], float]

    async def _load_aliases(self, backend: Any) -> None:
        """Fill the map from the backend (called by `open`)."""
        self._aliases.clear()
        for row in await backend.alias_rows():
            self._aliases.set(row.platform, row.alias_id, row.canonical_id)

    def resolve_identity(self, platform: str, value: str) -> str:
        """The canonical id of `value` on `platform` by the stored aliases (chains followed);
        `value` itself when it is no alias. Synchronous (an in-memory map)."""
        if not value:
            return value
        return self._aliases.resolve(platform, value)

    async def record_aliases(self, aliases: Iterable[IdentityAlias]) -> int:
        """Record identity aliases (docs/behaviour.md §4) before they are used for a key.

        An alias already known is written again only to refresh `last_seen` (at most hourly).
        An alias that would close a loop (its canonical id already resolves to it) is refused
        with a warning naming the platform and the source, never the ids (they may be phone
        numbers); so is anything that is not an IdentityAlias.

        Returns:
            how many aliases were written (new, changed or refreshed).

        Raises:
            StoreError / sqlite3.Error / OSError: the write failed (the caller must not
                acknowledge the message that carried the alias).
        """
        written = 0
        async with self._alias_lock:
            for alias in aliases:
                if not isinstance(alias, IdentityAlias):
                    log.error("identity alias refused: expected an IdentityAlias, got %s", type(alias).__name__)
                    continue
                slot = (alias.platform, alias.alias_id)
                same = self._aliases.direct(*slot) == alias.canonical_id
                if same and time.monotonic() - self._alias_written.get(slot, float("-inf")) < LAST_SEEN_EVERY_S:
                    continue
                if not same and self._aliases.would_loop(alias.platform, alias.alias_id, alias.canonical_id):
                    log.warning("identity alias on %s (source %r) refused: it would make a loop of aliases",
                                alias.platform, alias.source)
                    continue
                await self._b().upsert_alias(alias.platform, alias.alias_id, alias.canonical_id,
                                             alias.source, format_timestamp(self._now()))
                self._aliases.set(alias.platform, alias.alias_id, alias.canonical_id)
                self._alias_written[slot] = time.monotonic()
                written += 1
        return written

    async def identity_aliases(self, platform: str | None = None) -> list[dict[str, Any]]:
        """Stored aliases (`{"platform", "alias_id", "canonical_id", "source", "first_seen",
        "last_seen"}`), ordered by platform then alias id; only `platform`'s when given."""
        rows = await self._b().alias_rows()
        return [row.as_dict() for row in rows if platform is None or row.platform == platform]

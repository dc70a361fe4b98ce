"""Per-session leases with fencing on PostgreSQL (docs/architecture.md §7).

A replica may write for a session key only while it holds the key's lease. The lease row's
`token` grows with every grant; this replica remembers the token it was granted, and every
write of the session starts, in its own transaction, with `fence()`: an UPDATE that extends the
lease only if the row still has this replica as holder, the same token and an expiry in the
future — on the database's clock (`now()`), never a replica's. The UPDATE also locks the row
until the write commits, so a takeover (which must update the same row) waits for that write
or finds the lease extended; a replica that was paused past its expiry finds another token and
its write is refused with LeaseLostError (logged), so it can never write for that session again.

Inside a `lease_scope` (one job of the runner) every write carries the token the scope first
wrote with, so a job begun under a lease that was lost stays refused even once this replica
holds the session again under a newer token. A key never leased, or released, is granted
inside the write that needs it. A key whose last
grant was never released (its holder died or stalled) is granted only by `acquire()`, whose
caller runs that session's crash recovery before any new input (`LeaseGrant.takeover`).

Renewal runs every third of the lease time; a key idle for a whole lease time whose turn marker
is clear is released, so another replica can take the session without waiting for expiry.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Iterable

import psycopg
from hermes_core.store.backend import LeaseGrant, LeaseLostError, scope_tokens

log = logging.getLogger(__name__)

_TTL = "now() + %(ttl)s * interval '1 second'"


class Leases:
    """The leases this replica holds, and the statements that grant, check and renew them.

    Args:
        replica_id: this replica's holder name (unique per process).
        ttl_s: seconds a lease lasts unless renewed (`[store] lease_ttl_s`).
    """

    def __init__(self, replica_id: str, ttl_s: float) -> None:
        self.replica_id = replica_id
        self.ttl_s = float(ttl_s)
        self.held: dict[str, int] = {}
        self.sticky: set[str] = set()  # never released for idleness (ingress receivers)
        self._used: dict[str, float] = {}
        self.refused = 0  # fenced writes refused so far (tests and metrics read it)

    def _params(self, key: str, **more: Any) -> dict[str, Any]:
        return {"key": key, "me": self.replica_id, "ttl": self.ttl_s, **more}

    async def grant(self, conn: psycopg.AsyncConnection, key: str) -> LeaseGrant | None:
        """Grant the key's lease to this replica inside the caller's transaction. None when
        another replica holds it live. The caller records the token once the transaction
        commits (`granted`)."""
        for _attempt in range(2):
            cur = await conn.execute(
                "SELECT holder, token, expires_at > now() FROM session_leases WHERE session_key = %(key)s "
                "FOR UPDATE", self._params(key))
            row = await cur.fetchone()
            if row is None:
                cur = await conn.execute(
                    f"INSERT INTO session_leases (session_key, holder, token, expires_at) "
                    f"VALUES (%(key)s, %(me)s, 1, {_TTL}) ON CONFLICT (session_key) DO NOTHING RETURNING token",
                    self._params(key))
                inserted = await cur.fetchone()
                if inserted is not None:
                    return LeaseGrant(key, inserted[0], takeover=False)
                continue  # another replica inserted it meanwhile: read its row
            holder, current, live = row
            if live and holder == self.replica_id:
                # Granted to this replica by a concurrent call that has not recorded it yet:
                # the same lease, not a new one (a second grant would fence the first out).
                return LeaseGrant(key, current, takeover=False)
            if live and holder is not None:
                return None
            cur = await conn.execute(
                f"UPDATE session_leases SET holder = %(me)s, token = token + 1, expires_at = {_TTL} "
                f"WHERE session_key = %(key)s RETURNING token", self._params(key))
            token = (await cur.fetchone())[0]
            # Never released: its holder — maybe this replica, before it lost the lease — may
            # have left a turn in flight.
            return LeaseGrant(key, token, takeover=holder is not None, previous_holder=holder)
        return None

    def granted(self, grant: LeaseGrant, *, in_write: bool = False) -> None:
        """The transaction that made `grant` committed: writes now carry its token — and so
        does the enclosing `lease_scope` when a write of that scope was granted it
        (`in_write`); an explicit claim (`acquire`) never changes a running job's token."""
        self.held[grant.session_key] = grant.token
        self._used[grant.session_key] = asyncio.get_running_loop().time()
        scope = scope_tokens()
        if in_write and scope is not None:
            scope[grant.session_key] = grant.token

    async def fence(self, conn: psycopg.AsyncConnection, key: str) -> LeaseGrant | None:
        """Check (and extend) this replica's lease of `key` at the start of a write's
        transaction; grant a free key. Returns a new grant to record after commit, or None
        when the lease was already held.

        Raises:
            LeaseLostError: the lease was lost or is held by another replica, or the key needs
                a takeover (`acquire`) first; nothing may be written.
        """
        scope = scope_tokens()
        token = self.held.get(key)
        if scope is not None:
            # Work begun under a token keeps it: a lease lost and taken back is another lease.
            token = scope.setdefault(key, token) if token is not None else scope.get(key)
        if token is None:
            grant = await self.grant(conn, key)
            if grant is None:
                raise LeaseLostError(key, f"session {key} is leased by another replica")
            if grant.takeover:
                raise LeaseLostError(key, f"session {key} was left by replica {grant.previous_holder}; "
                                          f"it must be taken over (with its crash recovery) first")
            return grant
        cur = await conn.execute(
            f"UPDATE session_leases SET expires_at = {_TTL} WHERE session_key = %(key)s AND holder = %(me)s "
            f"AND token = %(token)s AND expires_at > now() RETURNING token", self._params(key, token=token))
        if await cur.fetchone() is None:
            self.lost(key, token)  # keeps a newer lease this replica took since
            raise LeaseLostError(key, f"fenced write refused: the lease of session {key} (token {token}) "
                                      f"is no longer held by replica {self.replica_id}")
        self._used[key] = asyncio.get_running_loop().time()
        return None

    async def hold_off(self, conn: psycopg.AsyncConnection, keys: Iterable[str]) -> None:
        """For an admin removal (`sessions delete`, `erase-user`, docs/operations.md §5), inside
        its transaction: lock the lease row of each key, so no replica is granted, takes over or
        extends one of them until the removal commits (`lock_row`), and refuse when another
        replica holds one live (it is working on that session: its next write must not meet rows
        removed under it). No lease is granted here: an expired, unreleased lease stays as it is, so
        the replica that takes it over still runs that session's crash recovery.

        Raises:
            LeaseLostError: another replica holds one of the keys live; nothing may be removed.
        """
        for key in sorted(set(keys)):  # one order for every removal: no deadlock between two
            holder, live = await self.lock_row(conn, key)
            if live and holder is not None and holder != self.replica_id:
                raise LeaseLostError(key, f"session {key} is leased by replica {holder}, which is working on it; "
                                          "nothing was removed: try again once that replica stops or its lease "
                                          "runs out")

    async def lock_row(self, conn: psycopg.AsyncConnection, key: str) -> tuple[str | None, bool]:
        """Lock the lease row of `key` until the caller's transaction ends, so no replica is
        granted, takes over or extends that lease meanwhile. A key never leased gets a released
        row (holder NULL, token 0: the next grant takes 1) to lock. Nothing is granted.

        Returns:
            `(holder, live)`: the holder's replica id (None when released) and whether its
            lease is unexpired on the database's clock.
        """
        await conn.execute("INSERT INTO session_leases (session_key, holder, token, expires_at) "
                           "VALUES (%(key)s, NULL, 0, now()) ON CONFLICT (session_key) DO NOTHING",
                           self._params(key))
        cur = await conn.execute("SELECT holder, expires_at > now() FROM session_leases "
                                 "WHERE session_key = %(key)s FOR UPDATE", self._params(key))
        holder, live = await cur.fetchone()
        return holder, bool(live)

    def lost(self, key: str, token: int) -> None:
        """Forget a lease found lost (refused write or failed renewal), loudly."""
        if self.held.get(key) == token:
            del self.held[key]
            self._used.pop(key, None)
        self.refused += 1
        log.error("fenced write refused: replica %s lost the lease of session %s (token %d); it no longer "
                  "writes for that session", self.replica_id, key, token)

    async def renew(self, conn: psycopg.AsyncConnection) -> list[str]:
        """Extend every held lease (one statement); release the idle ones. Returns the keys
        found lost (another replica took them over while this one was not renewing)."""
        if not self.held:
            return []
        keys, tokens = list(self.held), [self.held[k] for k in self.held]
        cur = await conn.execute(
            f"UPDATE session_leases l SET expires_at = {_TTL} FROM unnest(%(keys)s::text[], %(tokens)s::bigint[]) "
            f"AS h(k, t) WHERE l.session_key = h.k AND l.token = h.t AND l.holder = %(me)s AND l.expires_at > now() "
            f"RETURNING l.session_key", self._params("", keys=keys, tokens=tokens))
        kept = {r[0] for r in await cur.fetchall()}
        lost = [k for k, t in zip(keys, tokens) if k not in kept]
        for key, token in zip(keys, tokens):
            if key not in kept:
                self.lost(key, token)
        now = asyncio.get_running_loop().time()
        idle = [k for k in self.held if k not in self.sticky and now - self._used.get(k, now) >= self.ttl_s]
        if idle:
            await self._release(conn, idle, only_without_turn=True)
        return lost

    async def release_all(self, conn: psycopg.AsyncConnection) -> None:
        """Release every held lease (clean shutdown: nothing of ours is in flight)."""
        if self.held:
            await self._release(conn, list(self.held), only_without_turn=False)

    async def release(self, conn: psycopg.AsyncConnection, key: str) -> None:
        """Release one key's lease (no-op when not held)."""
        if key in self.held:
            await self._release(conn, [key], only_without_turn=False)

    async def _release(self, conn: psycopg.AsyncConnection, keys: list[str], *, only_without_turn: bool) -> None:
        tokens = [self.held[k] for k in keys]
        # A turn in flight keeps its lease even when idle: its agent may run for a long time.
        turn = ("AND NOT EXISTS (SELECT 1 FROM routes r WHERE r.session_key = l.session_key "
                "AND r.turn_started_ts IS NOT NULL) " if only_without_turn else "")
        cur = await conn.execute(
            f"UPDATE session_leases l SET holder = NULL, expires_at = now() "
            f"FROM unnest(%(keys)s::text[], %(tokens)s::bigint[]) AS h(k, t) "
            f"WHERE l.session_key = h.k AND l.token = h.t AND l.holder = %(me)s {turn}RETURNING l.session_key",
            self._params("", keys=keys, tokens=tokens))
        for (key,) in await cur.fetchall():
            self.held.pop(key, None)
            self._used.pop(key, None)
        if not only_without_turn:
            for key in keys:  # lost meanwhile: forget them too
                self.held.pop(key, None)
                self._used.pop(key, None)

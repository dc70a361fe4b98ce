"""Session claims on an engine shared by several gateway replicas (docs/architecture.md §7).
Mixed into `SessionStore`.

A replica works on a session only after `claim_session`: on a `LeasedBackend` that takes the
session's lease. When the previous lease was never released — its holder crashed, stalled or
was cut off — the claim is a takeover and runs that session's crash recovery before anything
else of it (seed §7; docs/behaviour.md §6): the turn marker is promoted to `resume_pending` (or
its saved reply is owed through the ledger), and the claim lists the session's open obligations
and waiting intake rows for the caller to resume. On a single-gateway engine every claim
succeeds at once with nothing to recover.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
from dataclasses import dataclass, field
from typing import Any

from .backend import LeasedBackend
from .files import read_json_object, write_atomic

log = logging.getLogger(__name__)

# Lease keys of ingress receivers, beside the session keys (`agent:...`) in the same lease table.
INGRESS_PREFIX = "ingress:"
# In HERMES_HOME: the replica id, host and pid of the last gateway that held the home lock there.
REPLICA_FILE_NAME = "replica.json"


def _process_gone(pid: Any) -> bool:
    """True only when no process `pid` runs on this host (or it is this process: a container's
    gateway gets the same pid at every start). Unsure (another user's process) is False."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


@dataclass(frozen=True, slots=True)
class SessionClaim:
    """A session this replica may now work on.

    Attributes:
        session_key: the key claimed.
        takeover: the previous holder never released it; recovery ran.
        resumed: recovery marked the interrupted turn `resume_pending` (auto-continue owes it).
        obligations: `open_obligations()` items of this key, oldest first (after a takeover).
        intake: `pending_inbound()` items of this key, in arrival order (after a takeover).
        previous_holder: the replica that held it before a takeover, else None.
    """

    session_key: str
    takeover: bool = False
    resumed: bool = False
    obligations: list[dict[str, Any]] = field(default_factory=list)
    intake: list[dict[str, Any]] = field(default_factory=list)
    previous_holder: str | None = None


class ClaimOps:
    """`claim_session` / `release_session`. Relies on the SessionStore attributes `_b()`,
    `config`, `_lock_home`, `recover_interrupted_turns`, `open_obligations` and `pending_inbound`."""

    @property
    def leased(self) -> bool:
        """True when the engine leases sessions to replicas (`LeasedBackend`)."""
        return isinstance(self._b(), LeasedBackend)

    def holds_session(self, session_key: str) -> bool:
        """True when this replica may write for `session_key` (always, without leases)."""
        backend = self._b()
        return not isinstance(backend, LeasedBackend) or backend.holds_lease(session_key)

    async def claim_session(self, session_key: str) -> SessionClaim | None:
        """Take `session_key` for this replica; after a takeover, run its crash recovery first.

        Returns:
            The claim, or None when another replica holds the session (leave its input to it).
        Raises:
            StoreError: the engine failed (nothing was claimed).
        """
        backend = self._b()
        if not isinstance(backend, LeasedBackend):
            return SessionClaim(session_key)
        grant = await backend.acquire_lease(session_key)
        if grant is None:
            return None
        if not grant.takeover:
            return SessionClaim(session_key)
        max_age = max(3600, 2 * self.config.agent.gateway_timeout)
        resumed = session_key in await self.recover_interrupted_turns(max_age, only_keys={session_key})
        obligations = [ob for ob in await self.open_obligations() if ob["session_key"] == session_key]
        intake = [row for row in await self.pending_inbound() if row.get("session_key") == session_key]
        log.warning("took over session %s from replica %s: %s, %d reply(ies) owed, %d message(s) waiting",
                    session_key, grant.previous_holder, "interrupted turn resumed" if resumed else "no turn resumed",
                    len(obligations), len(intake))
        return SessionClaim(session_key, True, resumed, obligations, intake, grant.previous_holder)

    async def claim_ingress(self, platform: str) -> bool:
        """Take (or keep) the right to receive for `platform` on this replica: the sticky lease
        `ingress:<platform>` (a single-receiver platform: one poller, socket or daemon per bot
        account, docs/architecture.md §7). Always True without leases."""
        backend = self._b()
        if not isinstance(backend, LeasedBackend):
            return True
        return await backend.acquire_lease(INGRESS_PREFIX + platform, sticky=True) is not None

    def holds_ingress(self, platform: str) -> bool:
        """True while this replica holds `platform`'s ingress lease (always, without leases)."""
        return self.holds_session(INGRESS_PREFIX + platform)

    async def take_back_own_leases(self) -> list[str]:
        """At a gateway's start on a leased store, before it claims anything: record this
        replica in `HERMES_HOME/replica.json`, and end at once the live leases of the previous
        gateway of this home when it is provably dead — this store holds the home lock (which
        that gateway held for its whole life), and its recorded host is this one and its pid
        runs no process. Its sessions and ingress are then taken over at the next claim, with
        a new fencing token and their crash recovery, instead of after `[store] lease_ttl_s`
        (docs/architecture.md §7). Anything unproven (another host, a live pid, no record)
        leaves the leases to run out. Returns the keys whose leases were ended.

        Raises:
            OSError: the record cannot be written (the start fails: a restart could not take
                this replica's leases back).
        """
        backend = self._b()
        expire = getattr(backend, "expire_leases_of", None)  # optional for a leased engine
        if not isinstance(backend, LeasedBackend) or not self._lock_home:
            return []
        path = self.config.home / REPLICA_FILE_NAME
        previous = await asyncio.to_thread(read_json_object, path)
        host = socket.gethostname()
        # Ours first: were this start killed after claiming, the next one knows whose leases to take.
        await asyncio.to_thread(write_atomic, path, json.dumps(
            {"replica_id": backend.replica_id, "host": host, "pid": os.getpid()}) + "\n")
        holder = previous.get("replica_id")
        if (expire is None or not isinstance(holder, str) or holder == backend.replica_id
                or previous.get("host") != host or not _process_gone(previous.get("pid"))):
            return []
        keys = await expire(holder)
        if keys:
            log.warning("the previous gateway of this home (replica %s, pid %s) is not running: its %d lease(s) are "
                        "taken over now instead of when they run out", holder, previous.get("pid"), len(keys))
        return keys

    async def orphaned_sessions(self) -> list[str]:
        """Sessions whose holder died or stalled past its lease (`[]` without leases)."""
        backend = self._b()
        if not isinstance(backend, LeasedBackend):
            return []
        return [key for key in await backend.orphaned_leases() if not key.startswith(INGRESS_PREFIX)]

    async def wait_for_intake(self, timeout_s: float) -> list[str]:
        """Wait for a hint that another replica accepted input, at most `timeout_s` seconds
        (`[]`: poll). Without leases, just waits."""
        backend = self._b()
        if isinstance(backend, LeasedBackend):
            return await backend.wait_for_intake(timeout_s)
        await asyncio.sleep(timeout_s)
        return []

    async def release_session(self, session_key: str) -> None:
        """Give the session up (nothing of it in flight here); no-op without leases."""
        backend = self._b()
        if isinstance(backend, LeasedBackend):
            await backend.release_lease(session_key)

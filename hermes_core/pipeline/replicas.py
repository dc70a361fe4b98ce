"""Several gateway replicas on one shared store (docs/architecture.md §7).

With a leased store (`store.leased`) every replica accepts input for any session — the intake's
unique key makes a redelivery to another replica a duplicate — but only the replica holding a
session's lease runs its work. `ReplicaCoordinator`:

* `admit(key, inbound_id)` (the runner asks it for every accepted message): claims the session;
  a session another replica holds is left to it (its intake row stays pending); a takeover
  queues the session's recovered work — owed replies, the interrupted turn, its waiting intake
  in arrival order — before anything new of it;
* a sweep, woken by the store's intake hints (LISTEN/NOTIFY on PostgreSQL) or every
  `[store] poll_interval_s` seconds: takes over sessions whose holder died or stalled past its
  lease (crash recovery first), and queues intake rows of sessions it holds that no worker here
  has (the hint's purpose: input another replica accepted for them), and rows of sessions
  nobody holds once they waited `claim_grace_s` (their accepting replica claims them at once
  unless it died).

Replaces the start-up recovery of a single gateway: on a shared store a replica never recovers
sessions it has not claimed (another replica may be running them).

Ingress (docs/adapters.md §6): a platform whose spec says `ingress = "shared"` (webhooks, Slack
Socket Mode) receives on every replica. A `"single_receiver"` platform (Telegram polling,
Discord's gateway connection, Signal, the WhatsApp bridge: a second receiver is refused or
doubles every event) is started only on the replica holding its ingress lease; when that
replica dies its lease runs out and the next sweep of another replica starts receiving there.
Sessions of such a platform are taken over only by its receiver, the one replica able to send
there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from ..store.keylocks import KeyedLocks

log = logging.getLogger(__name__)


class ReplicaCoordinator:
    """Claims and takeovers of one replica (module docstring).

    Args:
        store: the open SessionStore on a leased engine.
        runner: the GatewayRunner (its `admit` is set to `self.admit` by `start`).
        poll_interval_s: longest wait between sweeps when no hint arrives.
    """

    def __init__(self, store: Any, runner: Any, poll_interval_s: float,
                 receivers: Mapping[str, Any] | None = None) -> None:
        self.store = store
        self.runner = runner
        self.poll_interval_s = poll_interval_s
        # Adapters of single-receiver platforms, started only while this replica holds their
        # ingress lease; `receiving` are those started now.
        self.receivers = dict(receivers or {})
        self.receiving: set[str] = set()
        # Single-receiver platforms another replica receives for, said once each (a replica
        # waiting there, e.g. a second `chat` whose terminal accepts nothing yet, is never silent).
        self.standby: set[str] = set()
        self.takeovers = 0
        self._task: asyncio.Task | None = None
        # One claim of a session at a time here: a message admitted while the sweep takes its
        # session over must queue behind the recovered work, not beside it.
        self._claiming = KeyedLocks()
        # When this replica's sweeps first saw each waiting row of a session nobody holds: the
        # replica that accepted it claims it a moment later, so the sweep leaves it that long
        # (an accepting replica that died leaves it for good).
        self._first_seen: dict[int, float] = {}
        self.claim_grace_s = max(1.0, poll_interval_s)

    def start(self) -> None:
        """Route the runner's admissions through the leases and start sweeping."""
        self.runner.admit = self.admit
        self._task = asyncio.get_running_loop().create_task(self._sweep_forever(), name="replica sweep")

    async def stop(self) -> None:
        """Stop sweeping (idempotent); queued work stays with the runner's drain. The
        receivers are stopped by the app with every other adapter."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def tend_receivers(self) -> None:
        """Start each single-receiver platform whose ingress lease this replica can take
        (another replica's ran out: its receiver died); stop one whose lease was lost."""
        for platform, adapter in self.receivers.items():
            if platform in self.receiving:
                if self.store.holds_ingress(platform):
                    continue
                self.receiving.discard(platform)
                log.error("lost the ingress lease of %s; this replica stops receiving for it", platform)
                await adapter.stop()
            elif await self.store.claim_ingress(platform):
                await adapter.start()
                self.receiving.add(platform)
                self.standby.discard(platform)
                log.warning("this replica now receives for %s (its ingress lease)", platform)
            elif platform not in self.standby:
                self.standby.add(platform)
                log.warning("another replica receives for %s; this replica starts receiving for it when that one "
                            "stops (its ingress lease runs out)", platform)

    async def _may_take(self, key: str, platform: str | None = None) -> bool:
        """A session of a single-receiver platform is taken over only by that platform's
        receiver: the others cannot send there (their adapter is not started). `platform`:
        the session's, when known (an intake row's source), else read from its entry."""
        if not self.receivers:
            return True
        if platform is None:
            entry = await self.store.get_entry(key)
            platform = entry.platform if entry is not None else None
        return platform not in self.receivers or platform in self.receiving

    async def admit(self, key: str, inbound_id: int) -> bool:
        """Whether the runner should place accepted row `inbound_id` of `key` now. False when
        another replica holds the session (the row waits for it) or when a takeover queued the
        session's recovered work, this row included."""
        self.runner.reserve(inbound_id)  # before the claim's await: a sweep must not place it too
        try:
            async with self._claiming.hold(key):
                if self.runner.placed(inbound_id, or_reserved=False):
                    return False  # a sweep that read the row just before this reservation queued it
                claim = await self.store.claim_session(key)
                if claim is None:
                    log.info("message for %s left to the replica holding that session", key)
                    return False
                if claim.takeover:
                    await self._resume(claim, admitted=inbound_id)
                    return False
                return True
        finally:
            self.runner.reserve(inbound_id, False)

    async def sweep(self) -> None:
        """One round: orphaned sessions first (their recovery precedes new input), then intake
        rows no worker here has."""
        await self.tend_receivers()
        for key in await self.store.orphaned_sessions():
            if not await self._may_take(key):
                continue
            async with self._claiming.hold(key):
                claim = await self.store.claim_session(key)
                if claim is not None and claim.takeover:
                    await self._resume(claim)
        now = asyncio.get_running_loop().time()
        self.runner.forget_settled()  # rows finished before this read are not among its rows
        rows = await self.store.pending_inbound()
        self._first_seen = {row["id"]: self._first_seen.get(row["id"], now) for row in rows}
        for row in rows:
            key = row.get("session_key")
            if not key or self.runner.placed(row["id"]):
                continue
            if not self.store.holds_session(key) and now - self._first_seen[row["id"]] < self.claim_grace_s:
                continue  # just accepted elsewhere: its replica is claiming it
            async with self._claiming.hold(key):
                if self.runner.placed(row["id"]):  # admitted meanwhile
                    continue
                if not self.store.holds_session(key):
                    source = row["event"].get("source") if isinstance(row.get("event"), dict) else None
                    platform = source.get("platform") if isinstance(source, dict) else None
                    if not await self._may_take(key, platform):
                        continue
                    claim = await self.store.claim_session(key)
                    if claim is None:
                        continue
                    if claim.takeover:
                        await self._resume(claim)
                        continue
                await self.runner.restore_intake([row])

    async def _resume(self, claim: Any, admitted: int | None = None) -> None:
        """Queue a taken-over session's recovered work, in the start-up order (seed §7):
        owed replies, then the interrupted turn, then its waiting messages (`admitted`: the row
        being admitted, reserved but not placed yet)."""
        self.takeovers += 1
        key = claim.session_key
        for ob in claim.obligations:
            self.runner.enqueue_redelivery(ob)
        if claim.obligations:
            await self.store.clear_resume_pending(key)  # delivered, not answered a second time
        elif claim.resumed:
            entry = await self.store.get_entry(key)
            if entry is not None and entry.origin is not None:
                self.runner.enqueue_resume(key, entry)
        await self.runner.restore_intake([row for row in claim.intake if not self.runner.placed(
            row["id"], or_reserved=row["id"] != admitted)])

    async def _sweep_forever(self) -> None:
        while True:
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:  # the next round retries; nothing is lost while it fails
                log.exception("replica sweep failed")
            try:
                await self.store.wait_for_intake(self.poll_interval_s)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # hints are only hints: fall back to polling
                log.warning("waiting for intake hints failed (%s); polling", exc)
                await asyncio.sleep(self.poll_interval_s)

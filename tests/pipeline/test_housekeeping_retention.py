"""Intake and ledger retention as a housekeeping pass (docs/behaviour.md §5, §6): a real watcher tick
forgets finished inbound ids and settled obligations older than 7 days, keeps what is owed."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from pipeline_helpers import Clock

from hermes_core.model import SessionSource
from hermes_core.plugin_system import create_plugin_manager
from hermes_core.scheduler import Watcher
from hermes_core.settings import GatewayConfig
from hermes_core.store import SessionStore

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
DM = SessionSource("telegram", "1", chat_type="dm", user_id="1")
EVENT = {"source": DM.to_dict(), "text": "hi", "message_id": "m1", "media": [], "kind": "user",
         "received_at": "2026-03-01T12:00:00+00:00"}


async def test_tick_forgets_finished_rows_after_seven_days_and_keeps_owed_ones(tmp_path):
    clock = Clock(T0)
    config = GatewayConfig(home=tmp_path, session_store_max_age_days=0)
    store = SessionStore(config.sessions_dir, config, clock=clock)
    await store.open()
    try:
        entry = await store.get_or_create_session(DM)
        done = await store.accept_inbound_event(entry.session_key, EVENT)
        await store.finish_inbound(done)
        queued = await store.accept_inbound_event(entry.session_key, dict(EVENT, message_id="m2"))
        sent = await store.record_reply(entry.session_key, entry.session_id, None, origin=DM, content="sent")
        await store.start_delivery(sent)
        await store.finish_delivery(sent, True)
        owed = await store.record_reply(entry.session_key, entry.session_id, None, origin=DM, content="owed")
        watcher = Watcher(create_plugin_manager(None)[0], config, store, clock=clock)

        clock.now = T0 + timedelta(days=7, minutes=1)
        await watcher.tick()
        assert [r["id"] for r in await store.pending_inbound()] == [queued]
        assert await store.accept_inbound("telegram", "1", "m1") is True  # forgotten after 7 days
        assert await store.accept_inbound("telegram", "1", "m2") is False  # still queued: kept
        assert [r["id"] for r in await store.obligations_in("delivered", "pending")] == [owed]
    finally:
        await store.close()

"""The store contract: what every store engine (`hermes_core.store.backend.StoreBackend`) must
do, checked on an open, empty engine (docs/architecture.md §7, §8; docs/behaviour.md §2, §3, §5, §6).

The core runs it on SQLite; a store-backend distribution subclasses it with its own engine::

    from hermes_core.testing import StoreBackendContract

    class TestAcmeStore(StoreBackendContract):
        @pytest.fixture
        async def store_backend(self):
            backend = AcmeBackend(...)         # a fresh, empty database
            await backend.open()
            yield backend
            await backend.close()

Every check drives the engine through the Protocol only and compares literal values: the same
calls give the same answers on every engine.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from ..model import SessionEntry, SessionSource, TokenUsage, format_timestamp
from ..store.db import StoreError
from ..store.records import MessageRow, NewIntake, NewObligation, RetryTurn

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def source(user: str = "u1", chat: str = "c1", chat_type: str = "dm") -> SessionSource:
    """A Telegram-like origin for contract entries."""
    return SessionSource(platform="telegram", chat_id=chat, chat_type=chat_type, user_id=user, user_name="Ann")


def entry(key: str = "agent:main:telegram:dm:u1", session_id: str = "20260101_120000_aaaaaaaa",
          *, at: datetime = T0, origin: SessionSource | None = None, **fields) -> SessionEntry:
    """A route entry for `key` pointing at `session_id`, created and updated at `at`."""
    origin = origin or source()
    return SessionEntry(session_key=key, session_id=session_id, created_at=at, updated_at=at, origin=origin,
                        platform=origin.platform, chat_type=origin.chat_type, **fields)


def row(role: str, content: str | None, at: datetime = T0, **fields) -> MessageRow:
    """A transcript row stamped `at`."""
    return MessageRow(role=role, content=content, timestamp=format_timestamp(at), **fields)


def obligation(key: str, sid: str, content: str, *, message_id: int | None = None) -> NewObligation:
    """A 'pending' obligation for `content`, recorded at T0."""
    return NewObligation(session_key=key, session_id=sid, origin=json.dumps(source().to_dict()), content=content,
                         internal=False, reply_to="m1", now_iso=format_timestamp(T0), now_ts=T0.timestamp(),
                         message_id=message_id)


KEY = "agent:main:telegram:dm:u1"
SID = "20260101_120000_aaaaaaaa"


class StoreBackendContract:
    """Checks every store engine passes. Subclasses provide the async fixture `store_backend`:
    an open engine on an empty database (closed by the fixture)."""

    @pytest.fixture
    def store_backend(self):  # pragma: no cover - always overridden
        raise NotImplementedError("a StoreBackendContract subclass must define the store_backend fixture")

    # ---- routes and sessions ----------------------------------------------------------------

    async def test_new_session_route_round_trip(self, store_backend):
        b = store_backend
        assert await b.has_any_sessions() is False
        await b.save(entry(), new_session=True)
        got = await b.get_route(KEY)
        assert (got.session_key, got.session_id, got.updated_at, got.origin.user_id) == (KEY, SID, T0, "u1")
        assert (await b.route_for_session_id(SID)).session_key == KEY
        info = await b.session_info(SID)
        assert (info.session_key, info.platform, info.chat_id, info.participant_id, info.created_at,
                info.ended_at) == (KEY, "telegram", "c1", "u1", "2026-01-01T12:00:00+00:00", None)
        assert await b.has_any_sessions() is True
        assert await b.get_route("agent:main:telegram:dm:nobody") is None
        assert await b.session_info("20260101_120000_ffffffff") is None

    async def test_reset_ends_the_old_session_and_switch_reopens_it(self, store_backend):
        b = store_backend
        old, new = SID, "20260101_130000_bbbbbbbb"
        await b.save(entry(), new_session=True)
        later = T0 + timedelta(hours=1)
        await b.save(entry(session_id=new, at=later), new_session=True, parent_session_id=old,
                     end_session=(old, "reset"))
        ended = await b.session_info(old)
        assert (ended.ended_at, ended.end_reason) == ("2026-01-01T13:00:00+00:00", "reset")
        assert (await b.session_info(new)).parent_session_id == old
        await b.save(entry(session_id=old, at=later), end_session=(new, "session_switch"), reopen_session=old)
        assert ((await b.session_info(old)).ended_at, (await b.session_info(new)).end_reason) == (None,
                                                                                               "session_switch")
        assert (await b.get_route(KEY)).session_id == old

    async def test_session_row_counters_follow_the_entry(self, store_backend):
        b = store_backend
        await b.save(entry(), new_session=True)
        counted = entry(input_tokens=7, output_tokens=5, total_tokens=12, estimated_cost_usd=0.25,
                        cost_status="estimated", at=T0 + timedelta(minutes=5))
        await b.save(counted, usage=TokenUsage(input_tokens=7, output_tokens=5, total_tokens=12))
        info = await b.session_info(SID)
        assert (info.input_tokens, info.output_tokens, info.total_tokens, info.estimated_cost_usd,
                info.cost_status, info.updated_at) == (7, 5, 12, 0.25, "estimated", "2026-01-01T12:05:00+00:00")

    async def test_session_row_keeps_the_counters_its_route_leaves_it_with(self, store_backend):
        """A reset moves the route to a new session and pruning removes it: either way the
        session's row keeps the entry's last counters (docs/behaviour.md §3), and the ended one
        its end time."""
        b = store_backend
        other_key, other_sid, new = "agent:main:telegram:dm:u9", "20260101_120000_00000009", "20260101_130000_bbbbbbbb"
        await b.save(entry(), new_session=True)
        await b.save(entry(other_key, other_sid), new_session=True)
        await b.save(entry(input_tokens=7, output_tokens=5, total_tokens=12, estimated_cost_usd=0.25,
                           cost_status="estimated", at=T0 + timedelta(minutes=5)))
        await b.save(entry(other_key, other_sid, input_tokens=3, total_tokens=3, at=T0 + timedelta(minutes=6)))
        await b.save(entry(session_id=new, at=T0 + timedelta(hours=1)), new_session=True, parent_session_id=SID,
                     end_session=(SID, "reset"))
        ended = await b.session_info(SID)
        assert (ended.input_tokens, ended.output_tokens, ended.total_tokens, ended.estimated_cost_usd,
                ended.cost_status, ended.updated_at) == (7, 5, 12, 0.25, "estimated", "2026-01-01T13:00:00+00:00")
        assert ((await b.session_info(new)).total_tokens, (await b.session_info(new)).cost_status) == (0, "unknown")
        await b.delete_routes([other_key])
        pruned = await b.session_info(other_sid)
        assert (pruned.input_tokens, pruned.total_tokens, pruned.updated_at) == (3, 3, "2026-01-01T12:06:00+00:00")

    async def test_a_session_two_routes_point_at_is_listed_once(self, store_backend):
        """`/resume` can point a second key at a session another key still uses: the full
        listing (`sessions list --all`, docs/operations.md §5) still has one row for it."""
        b = store_backend
        await b.save(entry(), new_session=True)
        await b.save(entry("agent:main:telegram:dm:u2", SID, at=T0 + timedelta(minutes=1)))
        rows, total = await b.all_sessions(10, 0)
        assert ([(r[0], r[-1]) for r in rows], total) == ([(SID, True)], 1)

    async def test_a_session_two_routes_point_at_shows_the_last_writer_s_counters(self, store_backend):
        """Chat B resumed the session chat A goes on in; when A starts anew, the session keeps
        A's last counters, not B's older ones, until B writes again (docs/behaviour.md §3)."""
        b = store_backend
        key_b, new = "agent:main:telegram:dm:u2", "20260101_150000_cccccccc"
        await b.save(entry(), new_session=True)
        await b.save(entry(key_b, SID, total_tokens=300, at=T0 + timedelta(minutes=1)))
        await b.save(entry(total_tokens=2005, at=T0 + timedelta(minutes=2)))
        assert (await b.session_info(SID)).total_tokens == 2005
        await b.save(entry(session_id=new, at=T0 + timedelta(hours=3)), new_session=True, end_session=(SID, "reset"))
        assert (await b.session_info(SID)).total_tokens == 2005
        await b.save(entry(key_b, SID, total_tokens=310, at=T0 + timedelta(hours=4)))
        info = await b.session_info(SID)
        assert (info.total_tokens, info.updated_at) == (310, "2026-01-01T16:00:00+00:00")

    async def test_listing_pruning_and_resume_pending(self, store_backend):
        b = store_backend
        keys = [f"agent:main:telegram:dm:u{i}" for i in range(3)]
        for i, key in enumerate(keys):
            await b.save(entry(key, f"20260101_120000_0000000{i}", at=T0 + timedelta(hours=i)), new_session=True)
        assert [e.session_key for e in await b.list_routes(None)] == keys[::-1]
        assert [e.session_key for e in await b.list_routes((T0 + timedelta(hours=1)).timestamp())] == keys[:0:-1]
        flagged = entry(keys[0], "20260101_120000_00000000", resume_pending=True, resume_reason="restart_timeout")
        await b.save(flagged)
        assert [e.session_key for e in await b.resume_pending_routes()] == [keys[0]]
        await b.touch_routes([entry(keys[1], "20260101_120000_00000001", at=T0 + timedelta(hours=9))])
        assert (await b.get_route(keys[1])).updated_at == T0 + timedelta(hours=9)
        assert await b.routes_older_than((T0 + timedelta(hours=3)).timestamp()) == [(keys[0], False), (keys[2], False)]
        await b.delete_routes([keys[0]])
        assert await b.get_route(keys[0]) is None
        # Pruning removes only the route: the session is not ended and the next message on the
        # key re-adopts it (docs/behaviour.md §2).
        pruned = await b.session_info("20260101_120000_00000000")
        assert (pruned.end_reason, pruned.ended_at) == (None, None)
        assert (await b.adoptable_session(keys[0])).session_id == "20260101_120000_00000000"
        assert await b.adoptable_session(keys[1]) is None  # its route still points at it

    async def test_touch_routes_writes_the_touch_time_only_where_the_route_still_points(self, store_backend):
        b = store_backend
        kept, pruned, moved = (f"agent:main:telegram:dm:u{i}" for i in range(3))
        named = SessionSource(platform="telegram", chat_id="c1", chat_type="dm", user_id="u1",
                              chat_name="Zoë's \"chat\" 🚀")
        for i, key in enumerate((kept, pruned, moved)):
            await b.save(entry(key, f"20260101_120000_0000000{i}", origin=named), new_session=True)
        await b.delete_routes([pruned])
        await b.save(entry(moved, "20260101_120000_00000009"), new_session=True)
        touches = [entry(k, f"20260101_120000_0000000{i}", origin=named) for i, k in enumerate((kept, pruned, moved))]
        for touch in touches:
            touch.updated_at = T0 + timedelta(hours=2, microseconds=5)
        await b.touch_routes(touches)
        touched = await b.get_route(kept)
        assert (touched.updated_at, touched.created_at, touched.origin.chat_name) == (
            datetime(2026, 1, 1, 14, 0, 0, 5, tzinfo=timezone.utc), T0, "Zoë's \"chat\" 🚀")
        assert await b.get_route(pruned) is None  # a touch never brings back a pruned route
        moved_route = await b.get_route(moved)
        assert (moved_route.session_id, moved_route.updated_at) == ("20260101_120000_00000009", T0)
        assert await b.routes_older_than((T0 + timedelta(hours=1)).timestamp()) == [(moved, False)]
        mirror = json.loads(await b.render_mirror())
        assert mirror[kept]["updated_at"] == "2026-01-01T14:00:00.000005+00:00"

    # ---- transcripts ---------------------------------------------------------------------

    async def test_append_load_count_rewrite_rewind(self, store_backend):
        b = store_backend
        await b.save(entry(), new_session=True)
        assert await b.session_had_turn(SID) is False
        first = await b.append_message(SID, row("user", "hello there", platform_message_id="m1"))
        second = await b.append_message(SID, row("assistant", "hi Ann"))
        assert second > first
        await b.append_message(SID, row("user", "second question"))
        await b.append_message(SID, row("assistant", "second answer", reasoning='{"reasoning": "asked twice"}'))
        loaded = await b.load_messages(SID)
        assert loaded[3]["reasoning"] == "asked twice"  # kept beside the text (docs/behaviour.md §3)
        assert [(m["role"], m["content"]) for m in loaded] == [
            ("user", "hello there"), ("assistant", "hi Ann"), ("user", "second question"),
            ("assistant", "second answer")]
        assert loaded[0]["platform_message_id"] == "m1"
        assert (await b.count_turns(SID), await b.session_had_turn(SID)) == (2, True)
        assert await b.rewind(SID, 1) == {"rewound_count": 2, "turns_undone": 1, "target_text": "second question"}
        assert await b.count_turns(SID) == 1
        assert (await b.session_info(SID)).rewind_count == 1
        await b.rewrite(SID, [row("user", "summary"), row("assistant", "ok", tool_calls='[{"id": "t1"}]')])
        assert [(m["role"], m["content"]) for m in await b.load_messages(SID)] == [("user", "summary"),
                                                                                 ("assistant", "ok")]
        assert await b.load_messages("20260101_120000_ffffffff") == []
        assert await b.rewind("20260101_120000_ffffffff", 1) is None

    async def test_rewind_settles_the_commands_intake_row_or_begins_the_turn_again(self, store_backend):
        # docs/behaviour.md §11: /undo's intake row is finished, /retry's turn begun again, in
        # the rewind's own transaction.
        b = store_backend
        await b.save(entry(), new_session=True)
        for role, content in (("user", "first"), ("assistant", "one"), ("user", "second"), ("assistant", "two")):
            await b.append_message(SID, row(role, content))
        now = "2026-01-01T12:00:00Z"
        undo = await b.intake_accept("telegram", "c1", "m3", KEY, '{"text": "/undo"}', now, T0.timestamp())
        retry = await b.intake_accept("telegram", "c1", "m4", KEY, '{"text": "/retry"}', now, T0.timestamp())
        assert await b.rewind(SID, 1, undo, T0.timestamp()) == {"rewound_count": 2, "turns_undone": 1,
                                                                "target_text": "second"}
        assert [(r.id, r.state) for r in await b.intake_open()] == [(retry, "pending")]
        again = RetryTurn(KEY, row("user", "", platform_message_id="m4"), T0.timestamp() + 5)
        assert await b.rewind(SID, 1, retry, T0.timestamp(), again) == {"rewound_count": 2, "turns_undone": 1,
                                                                        "target_text": "first"}
        assert [(m["role"], m["content"], m["platform_message_id"]) for m in await b.load_messages(SID)] == [
            ("user", "first", "m4")]
        [marker] = await b.turn_markers()
        assert (marker.session_key, marker.session_id, marker.started_ts) == (KEY, SID, T0.timestamp() + 5)
        assert [(r.id, r.state) for r in await b.intake_open()] == [(retry, "running")]
        assert (await b.session_info(SID)).rewind_count == 2
        # A last user message without text (a file alone) is not rewound: nothing to run again.
        await b.append_message(SID, row("assistant", "again"))
        await b.append_message(SID, row("user", " "))
        assert await b.rewind(SID, 1, None, T0.timestamp(), again) is None
        assert (await b.count_turns(SID), (await b.session_info(SID)).rewind_count) == (2, 2)

    async def test_rewrite_finishes_the_commands_intake_row_in_its_transaction(self, store_backend):
        # docs/behaviour.md §11: /compress's intake row is finished with its rewrite; another
        # open row is left as it was.
        b = store_backend
        await b.save(entry(), new_session=True)
        for role, content in (("user", "first"), ("assistant", "one")):
            await b.append_message(SID, row(role, content))
        now = "2026-01-01T12:00:00Z"
        compress = await b.intake_accept("telegram", "c1", "m3", KEY, '{"text": "/compress"}', now, T0.timestamp())
        other = await b.intake_accept("telegram", "c1", "m4", KEY, '{"text": "later"}', now, T0.timestamp())
        await b.rewrite(SID, [row("system", "summary")], compress, T0.timestamp() + 7)
        assert [(m["role"], m["content"]) for m in await b.load_messages(SID)] == [("system", "summary")]
        assert [(r.id, r.state) for r in await b.intake_open()] == [(other, "pending")]
        # Without an intake row (the automatic compression after a turn) no row is touched.
        await b.rewrite(SID, [row("system", "summary 2")])
        assert [(r.id, r.state) for r in await b.intake_open()] == [(other, "pending")]

    async def test_rewind_and_rewrite_record_the_commands_answer_in_their_transaction(self, store_backend):
        # docs/behaviour.md §11, §6: /undo's and /compress's answers are owed from the commit of
        # their change on, carrying no transcript row; /undo's text says what its rewind found.
        b = store_backend
        await b.save(entry(), new_session=True)
        for role, content in (("user", "first"), ("assistant", "one"), ("user", "second"), ("assistant", "two")):
            await b.append_message(SID, row(role, content))
        seen: list[dict] = []

        def undone(result: dict) -> NewObligation:
            seen.append(result)
            return obligation(KEY, SID, f"Undid {result['turns_undone']} turn(s) ({result['rewound_count']} "
                                        f"message(s)), back to before \"{result['target_text']}\".")

        result = await b.rewind(SID, 1, None, T0.timestamp(), obligation=undone)
        assert seen == [{"rewound_count": 2, "turns_undone": 1, "target_text": "second"}]
        assert result == {"rewound_count": 2, "turns_undone": 1, "target_text": "second",
                          "obligation_id": result["obligation_id"]}
        [owed] = await b.obligations(("pending",))
        assert (owed.id, owed.content, owed.message_id, owed.session_key) == (
            result["obligation_id"], 'Undid 1 turn(s) (2 message(s)), back to before "second".', None, KEY)
        compressed = obligation(KEY, SID, "Compressed the conversation: 1 earlier message(s) summarised, "
                                          "1 kept as they were.")
        ob_id = await b.rewrite(SID, [row("system", "summary"), row("user", "first")], None, T0.timestamp(),
                                compressed)
        assert [(o.id, o.content, o.message_id) for o in await b.obligations(("pending",))][1:] == [
            (ob_id, "Compressed the conversation: 1 earlier message(s) summarised, 1 kept as they were.", None)]
        # Nothing to rewind: nothing owed, the function is never asked.
        await b.rewrite(SID, [row("system", "summary 2")])
        assert await b.rewind(SID, 1, None, T0.timestamp(), obligation=undone) is None
        assert (len(seen), len(await b.obligations(("pending",)))) == (1, 2)

    # ---- turns ---------------------------------------------------------------------------

    async def test_begin_turn_sets_the_marker_and_runs_the_intake_row(self, store_backend):
        b = store_backend
        await b.save(entry(), new_session=True)
        inbound = await b.intake_accept("telegram", "c1", "m1", KEY, '{"text": "hi"}', "2026-01-01T12:00:00Z",
                                        T0.timestamp())
        await b.begin_turn(KEY, SID, row("user", "hi", platform_message_id="m1"), T0.timestamp(), inbound)
        [marker] = await b.turn_markers()
        assert (marker.session_key, marker.session_id, marker.started_ts) == (KEY, SID, T0.timestamp())
        assert [(r.id, r.state) for r in await b.intake_open()] == [(inbound, "running")]
        assert await b.reply_row_after(SID, marker.message_id) is None
        await b.end_turn(KEY)
        assert await b.turn_markers() == []

    async def test_begin_turn_can_accept_the_message_and_a_duplicate_writes_nothing(self, store_backend):
        # docs/behaviour.md §12: the acceptance folded into the write that begins the turn.
        b = store_backend
        await b.save(entry(), new_session=True)
        accept = NewIntake("telegram", "c1", "m1", KEY, '{"text": "hi"}', "2026-01-01T12:00:00Z", T0.timestamp())
        inbound = await b.begin_turn(KEY, SID, row("user", "hi", platform_message_id="m1"), T0.timestamp(),
                                     accept=accept)
        assert isinstance(inbound, int)
        assert [(r.id, r.state, r.payload) for r in await b.intake_open()] == [(inbound, "running", '{"text": "hi"}')]
        assert [(m.session_key, m.session_id) for m in await b.turn_markers()] == [(KEY, SID)]
        await b.end_turn(KEY)
        assert await b.begin_turn(KEY, SID, row("user", "hi again", platform_message_id="m1"), T0.timestamp() + 1,
                                  accept=accept) is None
        assert [m["content"] for m in await b.load_messages(SID)] == ["hi"]
        assert await b.turn_markers() == []
        assert [r.id for r in await b.intake_open()] == [inbound]
        assert await b.intake_accept("telegram", "c1", "m1", KEY, '{"text": "hi"}', "2026-01-01T12:00:01Z",
                                     T0.timestamp() + 1) is None

    async def test_begin_turn_without_a_route_writes_nothing(self, store_backend):
        b = store_backend
        with pytest.raises(StoreError):
            await b.begin_turn(KEY, SID, row("user", "hi"), T0.timestamp())
        assert await b.load_messages(SID) == []

    async def test_resume_turn_only_without_a_reply(self, store_backend):
        b = store_backend
        await b.save(entry(), new_session=True)
        await b.append_message(SID, row("user", "unanswered", platform_message_id="m9"))
        last = await b.resume_turn(KEY, SID, T0.timestamp() + 5)
        assert (last.content, last.platform_message_id) == ("unanswered", "m9")
        assert [(m.message_id, m.started_ts) for m in await b.turn_markers()] == [(last.id, T0.timestamp() + 5)]
        await b.record_reply(KEY, SID, row("assistant", "answered"), None)
        assert await b.turn_markers() == []
        assert await b.resume_turn(KEY, SID, T0.timestamp() + 9) is None

    async def test_record_reply_with_its_obligation_in_one_write(self, store_backend):
        b = store_backend
        await b.save(entry(), new_session=True)
        await b.begin_turn(KEY, SID, row("user", "hi"), T0.timestamp())
        [marker] = await b.turn_markers()
        message_id, ob_id = await b.record_reply(KEY, SID, row("assistant", "hello"), obligation(KEY, SID, "hello"))
        assert (await b.reply_row_after(SID, marker.message_id)).id == message_id
        assert await b.obligation_for_message(message_id) == ob_id
        assert await b.turn_markers() == []
        [ob] = await b.obligations(("pending",))
        assert (ob.id, ob.content, ob.state, ob.attempts, ob.internal, ob.message_id, ob.reply_to,
                ob.created_ts) == (ob_id, "hello", "pending", 0, False, message_id, "m1", T0.timestamp())
        await b.obligation_update(ob_id, "attempting", "2026-01-01T12:00:01Z", T0.timestamp() + 1, attempt=True)
        await b.obligation_update(ob_id, "failed", "2026-01-01T12:00:02Z", T0.timestamp() + 2, error="HTTP 502")
        [ob] = await b.obligations(("failed",))
        assert (ob.attempts, ob.last_error, ob.updated_ts) == (1, "HTTP 502", T0.timestamp() + 2)
        await b.obligation_update(ob_id, "delivered", "2026-01-01T12:00:03Z", T0.timestamp() + 3, attempt=True)
        assert await b.obligations(("pending", "attempting", "failed")) == []
        assert await b.obligations_prune(T0.timestamp() + 3) == 0
        assert await b.obligations_prune(T0.timestamp() + 4) == 1
        # An orphan reply adopted by recovery: the obligation carries an existing row.
        _none, adopted = await b.record_reply(KEY, SID, None, obligation(KEY, SID, "hello", message_id=message_id))
        assert (await b.obligations(("pending",)))[0].message_id == message_id and adopted is not None

    async def test_record_reply_writes_the_entry_and_ends_the_turn(self, store_backend):
        b = store_backend
        await b.save(entry(), new_session=True)
        await b.begin_turn(KEY, SID, row("user", "hi"), T0.timestamp())
        later = T0 + timedelta(seconds=7)
        done = entry(at=later, input_tokens=3, output_tokens=4, total_tokens=7)
        await b.record_reply(KEY, SID, row("assistant", "hello", at=later), None, entry=done)
        route = await b.get_route(KEY)
        assert (route.session_id, route.total_tokens, route.updated_at) == (SID, 7, later)
        info = await b.session_info(SID)
        assert (info.input_tokens, info.output_tokens, info.total_tokens, info.updated_at) == (
            3, 4, 7, format_timestamp(later))
        assert await b.turn_markers() == []
        # The route was pruned meanwhile: the entry is written again.
        await b.delete_routes([KEY])
        await b.record_reply(KEY, SID, None, None, entry=entry(at=later, total_tokens=9))
        assert ((await b.get_route(KEY)).total_tokens, (await b.session_info(SID)).total_tokens) == (9, 9)
        # The key points at another session: the entry given replaces it, marker cleared.
        other = "20260101_120000_bbbbbbbb"
        await b.save(entry(session_id=other), new_session=True)
        await b.begin_turn(KEY, other, row("user", "there?"), T0.timestamp())
        await b.record_reply(KEY, SID, None, None, entry=entry(at=later, total_tokens=11))
        assert ((await b.get_route(KEY)).session_id, (await b.session_info(SID)).total_tokens) == (SID, 11)
        assert await b.turn_markers() == []

    async def test_delivery_reports_find_their_obligation_by_sent_id(self, store_backend):
        b = store_backend
        await b.save(entry(), new_session=True)
        _, ob_id = await b.record_reply(KEY, SID, row("assistant", "two chunks"), obligation(KEY, SID, "two chunks"))
        await b.obligation_update(ob_id, "delivered", "2026-01-01T12:00:01Z", T0.timestamp() + 1,
                                  sent_ids='["wamid.1", "wamid.2"]')
        assert await b.obligation_by_sent_id("telegram", "wamid.2", T0.timestamp()) == (ob_id, "delivered")
        assert await b.obligation_by_sent_id("slack", "wamid.2", T0.timestamp()) is None
        assert await b.obligation_by_sent_id("telegram", "wamid.3", T0.timestamp()) is None
        assert await b.obligation_by_sent_id("telegram", "wamid.1", T0.timestamp() + 2) is None
        # A later update without ids keeps the recorded ones.
        await b.obligation_update(ob_id, "delivered", "2026-01-01T12:00:03Z", T0.timestamp() + 3, error="read")
        assert await b.obligation_by_sent_id("telegram", "wamid.1", T0.timestamp() + 2) == (ob_id, "delivered")
        # Found in whatever state, settled ones too: the store tells "found, nothing to change"
        # from "no obligation sent it" (only the latter waits for outcomes, docs/behaviour.md §6).
        await b.obligation_update(ob_id, "abandoned", "2026-01-01T12:00:04Z", T0.timestamp() + 4, error="gave up")
        assert await b.obligation_by_sent_id("telegram", "wamid.2", T0.timestamp() + 4) == (ob_id, "abandoned")

    async def test_the_outcomes_of_several_sends_are_recorded_together(self, store_backend):
        # docs/behaviour.md §12 "'delivered' off the session's path": each keeps its attempts,
        # takes its own state, error and ids; an empty list writes nothing.
        b = store_backend
        await b.save(entry(), new_session=True)
        _, first = await b.record_reply(KEY, SID, row("assistant", "one"), obligation(KEY, SID, "one"))
        _, second = await b.record_reply(KEY, SID, row("assistant", "two"), obligation(KEY, SID, "two"))
        await b.obligation_update(first, "attempting", "2026-01-01T12:00:01Z", T0.timestamp() + 1, attempt=True)
        assert await b.obligations_finished([], "2026-01-01T12:00:02Z", T0.timestamp() + 2) == []
        assert await b.obligations_finished(
            [(first, "delivered", None, '["m.1"]'), (second, "failed", "HTTP 502", None)],
            "2026-01-01T12:00:03Z", T0.timestamp() + 3) == []
        [failed] = await b.obligations(("failed",))
        assert (failed.id, failed.attempts, failed.last_error, failed.updated_ts) == (
            second, 0, "HTTP 502", T0.timestamp() + 3)
        assert await b.obligations(("pending", "attempting")) == []
        assert await b.obligation_by_sent_id("telegram", "m.1", T0.timestamp()) == (first, "delivered")

    # ---- intake --------------------------------------------------------------------------

    async def test_intake_dedupe_order_merge_and_prune(self, store_backend):
        b = store_backend
        now = format_timestamp(T0)
        ids = [await b.intake_accept("telegram", "c1", f"m{i}", KEY, f'{{"n": {i}}}', now, T0.timestamp() + i)
               for i in range(3)]
        assert ids == sorted(ids) and None not in ids
        assert await b.intake_accept("telegram", "c1", "m1", KEY, '{"n": 1}', now, T0.timestamp()) is None
        assert await b.intake_accept("telegram", "c2", "m1", KEY, None, now, T0.timestamp(), done=True) is not None
        assert await b.intake_accept("telegram", "c2", "m1", KEY, None, now, T0.timestamp(), done=True) is None
        await b.intake_merge(ids[0], '{"n": "0+1"}', [ids[1]], T0.timestamp() + 5)
        assert [(r.id, r.session_key, r.payload, r.state) for r in await b.intake_open()] == [
            (ids[0], KEY, '{"n": "0+1"}', "pending"), (ids[2], KEY, '{"n": 2}', "pending")]
        await b.intake_finish(ids[0], T0.timestamp() + 6)
        assert [r.id for r in await b.intake_open()] == [ids[2]]
        # 'done' rows accepted before the cut: m0, m1 and the dedupe-only c2/m1 row (not the open m2).
        assert await b.intake_prune(T0.timestamp() + 2) == 3
        assert await b.intake_accept("telegram", "c1", "m0", KEY, None, now, T0.timestamp(), done=True) is not None

    # ---- search --------------------------------------------------------------------------

    async def test_search_matches_every_word_scoped_to_the_owner(self, store_backend):
        b = store_backend
        other = "20260101_120000_cccccccc"
        await b.save(entry(), new_session=True)
        await b.save(entry("agent:main:telegram:dm:u2", other, origin=source("u2", "c2")), new_session=True)
        hit = await b.append_message(SID, row("user", "the blue whale sings at night"))
        await b.append_message(SID, row("user", "a blue car"))
        other_hit = await b.append_message(other, row("user", "blue whale facts"))
        results = await b.search('"blue" "whale"', 10, 0, None)
        assert sorted((h.session_id, h.message_id) for h in results) == sorted([(SID, hit), (other, other_hit)])
        assert len(await b.search('"blue" "whale"', 1, 0, None)) == 1
        assert [h.message_id for h in await b.search('"blue" "whale"', 10, 1, None)] == [results[1].message_id]
        assert len(await b.search('"blue" "whale"', 10, 0, "telegram")) == 2
        assert await b.search('"blue" "whale"', 10, 0, "slack") == []
        # Each hit carries its session's origin: the store scopes hits to their owner with it.
        mine = [h for h in results if h.session_id == SID]
        assert json.loads(mine[0].origin)["user_id"] == "u1"
        assert "[blue]" in mine[0].snippet and "[whale]" in mine[0].snippet
        await b.rewind(SID, 2)
        assert [h.session_id for h in await b.search('"whale"', 10, 0, None)] == [other]
        assert await b.fts_check_and_repair() is False

    async def test_titles_and_recent_sessions(self, store_backend):
        b = store_backend
        other = "20260101_120000_dddddddd"
        await b.save(entry(), new_session=True)
        await b.save(entry(session_id=other, at=T0 + timedelta(minutes=1)), new_session=True)
        await b.append_message(SID, row("user", "first words", at=T0 + timedelta(minutes=5)))
        assert await b.set_title(other, "Trip plans") is True
        assert await b.set_title("20260101_120000_ffffffff", "nobody") is False
        assert (await b.session_info(other)).title == "Trip plans"
        listed = await b.recent_sessions("telegram", 10)
        assert [(s.session_id, s.title, s.message_count, s.first_user_text) for s in listed] == [
            (SID, None, 1, "first words"), (other, "Trip plans", 0, None)]
        assert listed[0].last_activity == "2026-01-01T12:05:00+00:00"
        assert await b.recent_sessions("slack", 10) == []

    # ---- meta, mirror, import, aliases -----------------------------------------------------

    async def test_meta_mirror_import_and_aliases(self, store_backend):
        b = store_backend
        assert await b.get_meta("mirror_signature") is None
        await b.set_meta("mirror_signature", "10:20")
        await b.set_meta("mirror_signature", "11:21")
        assert await b.get_meta("mirror_signature") == "11:21"
        imported = [entry(), entry("agent:main:telegram:dm:u2", "20260101_120000_dddddddd", input_tokens=3)]
        assert await b.import_entries(imported, False) == (2, 0)
        assert await b.import_entries(imported[:1], False) == (0, 1)
        assert (await b.session_info("20260101_120000_dddddddd")).input_tokens == 3
        mirror = json.loads(await b.render_mirror())
        assert sorted(k for k in mirror if not k.startswith("_")) == [KEY, "agent:main:telegram:dm:u2"]
        assert mirror[KEY]["session_id"] == SID
        await b.upsert_alias("telegram", "-100", "-200", "migrate", "2026-01-01T12:00:00Z")
        await b.upsert_alias("telegram", "-100", "-300", "migrate2", "2026-01-02T12:00:00Z")
        [alias] = await b.alias_rows()
        assert alias.as_dict() == {"platform": "telegram", "alias_id": "-100", "canonical_id": "-300",
                                   "source": "migrate2", "first_seen": "2026-01-01T12:00:00Z",
                                   "last_seen": "2026-01-02T12:00:00Z"}

"""Owner scoping of `lookup_by_session_id(owner=…)` and `search_transcripts(owner=…)` goes
through the store's shared-session predicate and canonical ids (docs/behaviour.md §2 owner scoping, §4
canonical ids; seed §5), and platform names are kept verbatim (docs/behaviour.md §1)."""

from __future__ import annotations

from hermes_core import GatewayConfig, SessionSource, build_session_key
from hermes_core.store import SessionStore

ALICE = SessionSource(platform="slack", chat_id="C-team", chat_type="group", user_id="U-alice")
BOB = SessionSource(platform="slack", chat_id="C-team", chat_type="group", user_id="U-bob")


async def _alice_session(store: SessionStore) -> str:
    entry = await store.get_or_create_session(ALICE)
    await store.append_to_transcript(entry.session_id, {"role": "user", "content": "where is the lighthouse",
                                                        "timestamp": "2026-03-01T12:00:00+00:00"})
    return entry.session_id


async def test_default_rule_keeps_per_user_group_sessions_private(config, clock):
    # group_sessions_per_user=True (the default): the group is not shared, Bob sees nothing of Alice's
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        sid = await _alice_session(store)
        assert await store.lookup_by_session_id(sid, owner=BOB) is None
        assert await store.search_transcripts("lighthouse", owner=BOB) == []
        assert (await store.lookup_by_session_id(sid, owner=ALICE)).session_id == sid
        assert [r["session_id"] for r in await store.search_transcripts("lighthouse", owner=ALICE)] == [sid]


async def test_deployment_shared_predicate_opens_the_chat_to_its_members(config, clock):
    calls: list[str] = []

    def team_channels_are_shared(source: SessionSource) -> bool:  # a deployment override
        calls.append(source.chat_id)
        return source.platform == "slack" and source.chat_id == "C-team"

    async with SessionStore(config.sessions_dir, config, clock=clock,
                            shared_fn=team_channels_are_shared) as store:
        sid = await _alice_session(store)
        found = await store.lookup_by_session_id(sid, owner=BOB)
        assert (found.session_id, found.origin.user_id) == (sid, "U-alice")
        assert await store.search_transcripts("lighthouse", owner=BOB) == [
            {"session_id": sid, "message_id": 1, "snippet": "where is the [lighthouse]"}]
        # another chat of the same platform stays closed
        stranger = SessionSource(platform="slack", chat_id="C-other", chat_type="group", user_id="U-bob")
        assert await store.lookup_by_session_id(sid, owner=stranger) is None
        assert await store.search_transcripts("lighthouse", owner=stranger) == []
    assert set(calls) == {"C-team"}  # the predicate judges the session (its origin), not the asker


async def test_deployment_predicate_can_also_close_a_chat(tmp_path, clock):
    # config says groups are shared; the deployment says they are not
    config = GatewayConfig(home=tmp_path / "home", group_sessions_per_user=False)
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        sid = await _alice_session(store)
        assert (await store.lookup_by_session_id(sid, owner=BOB)).session_id == sid
    async with SessionStore(config.sessions_dir, config, clock=clock, shared_fn=lambda source: False) as store:
        assert await store.lookup_by_session_id(sid, owner=BOB) is None
        assert await store.search_transcripts("lighthouse", owner=BOB) == []
        assert (await store.lookup_by_session_id(sid, owner=ALICE)).session_id == sid


async def test_participant_ids_compare_canonically(config, clock):
    jid = SessionSource(platform="whatsapp", chat_id="15551234567@s.whatsapp.net", chat_type="dm",
                        user_id="15551234567:12@s.whatsapp.net")
    phone = SessionSource(platform="whatsapp", chat_id="15551234567@s.whatsapp.net", chat_type="dm",
                          user_id="+15551234567")
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        sid = (await store.get_or_create_session(jid)).session_id
        assert (await store.lookup_by_session_id(sid, owner=phone)).session_id == sid


async def test_canonical_fn_folds_aliases(config, clock):
    lid = SessionSource(platform="signal", chat_id="chat-1", chat_type="dm", user_id="uuid-aaaa")
    number = SessionSource(platform="signal", chat_id="chat-2", chat_type="dm", user_id="+4915112345")
    aliases = {"uuid-aaaa": "+4915112345"}
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        sid = (await store.get_or_create_session(lid)).session_id
        assert await store.lookup_by_session_id(sid, owner=number) is None  # raw ids differ
    async with SessionStore(config.sessions_dir, config, clock=clock,
                            canonical_fn=lambda platform, kind, value: aliases.get(value, value)) as store:
        assert (await store.lookup_by_session_id(sid, owner=number)).session_id == sid


async def test_platform_name_is_kept_verbatim(config, clock):
    source = SessionSource(platform="AcmeChat", chat_id="42", chat_type="dm", user_id="7")
    assert source.platform == "AcmeChat"
    assert build_session_key(source) == "agent:main:AcmeChat:dm:42"
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        entry = await store.get_or_create_session(source)
        assert (entry.session_key, entry.platform) == ("agent:main:AcmeChat:dm:42", "AcmeChat")
        lower = SessionSource(platform="acmechat", chat_id="42", chat_type="dm", user_id="7")
        assert await store.lookup_by_session_id(entry.session_id, owner=lower) is None
        assert (await store.lookup_by_session_id(entry.session_id, owner=source)).session_id == entry.session_id


async def _with_text(store: SessionStore, source: SessionSource, text: str) -> str:
    entry = await store.get_or_create_session(source)
    await store.append_to_transcript(entry.session_id, {"role": "user", "content": text})
    return entry.session_id


async def test_a_thread_member_reaches_neither_private_sessions_nor_other_threads(config, clock):
    """docs/behaviour.md §2: in chat C1, Alice's own session (group, per user) is private and
    thread T2 is another shared session; Bob, a member of thread T1, reaches only T1."""
    alice_private = SessionSource("slack", "C1", chat_type="group", user_id="UA")
    carol_thread2 = SessionSource("slack", "C1", chat_type="group", user_id="UC", thread_id="T2")
    bob_thread1 = SessionSource("slack", "C1", chat_type="group", user_id="UB", thread_id="T1")
    dan_thread1 = SessionSource("slack", "C1", chat_type="group", user_id="UD", thread_id="T1")
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        private = await _with_text(store, alice_private, "harbour plans private")
        other_thread = await _with_text(store, carol_thread2, "harbour plans thread two")
        own_thread = await _with_text(store, bob_thread1, "harbour plans thread one")
        assert await store.lookup_by_session_id(private, owner=bob_thread1) is None
        assert await store.lookup_by_session_id(other_thread, owner=bob_thread1) is None
        assert (await store.lookup_by_session_id(own_thread, owner=dan_thread1)).session_id == own_thread
        assert [h["session_id"] for h in await store.search_transcripts("harbour", owner=bob_thread1)] == [own_thread]
        assert [h["session_id"] for h in await store.search_transcripts("harbour", owner=alice_private)] == [private]
        # unscoped (the operator's CLI) sees all three
        assert len(await store.search_transcripts("harbour")) == 3


async def test_search_compares_canonical_ids_not_raw_ones(config, clock):
    jid = SessionSource(platform="whatsapp", chat_id="15551234567@s.whatsapp.net", chat_type="dm",
                        user_id="15551234567:12@s.whatsapp.net")
    phone = SessionSource(platform="whatsapp", chat_id="15551234567@s.whatsapp.net", chat_type="dm",
                          user_id="+15551234567")
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        sid = await _with_text(store, jid, "the ferry timetable")
        assert [h["session_id"] for h in await store.search_transcripts("ferry", owner=phone)] == [sid]


async def test_scoped_search_fills_its_limit_past_sessions_the_owner_cannot_reach(config, clock):
    bob = SessionSource("slack", "D1", chat_type="dm", user_id="UB")
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        for n in range(60):  # more than one page of other people's matches
            await _with_text(store, SessionSource("slack", f"D{n + 100}", chat_type="dm", user_id=f"U{n}"),
                             "lantern festival")
        mine = await _with_text(store, bob, "lantern festival")
        assert [h["session_id"] for h in await store.search_transcripts("lantern", limit=5, owner=bob)] == [mine]


async def test_a_shared_thread_reaches_only_its_own_thread_and_resume_lists_the_same(config, clock):
    # docs/behaviour.md §2: for a shared session, the same chat AND the same thread.
    def shared(source: SessionSource) -> bool:
        return source.chat_id == "C-team"

    in_a = SessionSource(platform="slack", chat_id="C-team", chat_type="group", user_id="U-alice", thread_id="A")
    bob_in_a = SessionSource(platform="slack", chat_id="C-team", chat_type="group", user_id="U-bob", thread_id="A")
    bob_in_b = SessionSource(platform="slack", chat_id="C-team", chat_type="group", user_id="U-bob", thread_id="B")
    async with SessionStore(config.sessions_dir, config, clock=clock, shared_fn=shared) as store:
        entry = await store.get_or_create_session(in_a)
        sid = entry.session_id
        await store.append_to_transcript(sid, {"role": "user", "content": "thread a lighthouse",
                                               "timestamp": "2026-03-01T12:00:00+00:00"})
        assert (await store.lookup_by_session_id(sid, owner=bob_in_a)).session_id == sid
        assert await store.lookup_by_session_id(sid, owner=bob_in_b) is None
        assert [r["session_id"] for r in await store.search_transcripts("lighthouse", owner=bob_in_a)] == [sid]
        assert await store.search_transcripts("lighthouse", owner=bob_in_b) == []
        assert [s["session_id"] for s in await store.recent_sessions(bob_in_a)] == [sid]
        assert await store.recent_sessions(bob_in_b) == []
        assert await store.recent_sessions(in_a) == [{
            "session_id": sid, "title": None, "last_activity": "2026-03-01T12:00:00+00:00",
            "message_count": 1, "first_user_text": "thread a lighthouse"}]

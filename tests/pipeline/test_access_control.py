"""Access control in a running gateway (docs/behaviour.md §9): who is answered, what a refused
sender leaves behind (nothing), the refusal notice and its rate limit, bots, aliases, chats,
roles, the start-up warning and the `hermes_authorize` override."""

import logging
import sqlite3

from hermes_core.markers import override
from hermes_core.model import IdentityAlias, MessageEvent, SessionSource
from hermes_core.pipeline.access import NOTICE_EVERY_S

from pipeline_helpers import RecordingAdapter, dm, start_app
from hermes_core.agents.echo import EchoAgent

PRIVATE = "This assistant is private."


async def _app(tmp_path, table, adapter=None, **config):
    adapter = adapter or RecordingAdapter()
    app = await start_app(tmp_path, adapter, EchoAgent(), platforms={"testchat": table}, **config)
    return app, adapter


async def _send(app, source, text, message_id=None, aliases=()):
    await app.runner.handle(MessageEvent(source=source, text=text, message_id=message_id, aliases=list(aliases)))
    await app.runner.join()


def _row_counts(home):
    conn = sqlite3.connect(home / "state.db")
    try:
        tables = ("sessions", "messages", "routes", "inbound", "delivery_obligations", "identity_aliases")
        return {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables}
    finally:
        conn.close()


async def test_an_allowed_user_is_answered_and_a_stranger_is_refused_leaving_nothing(tmp_path):
    app, adapter = await _app(tmp_path, {"allowed_users": ["u1"]})
    try:
        await _send(app, dm("100", user="u1"), "hello", "m1")
        await _send(app, dm("200", user="u2"), "let me in", "m2",
                    aliases=[IdentityAlias("testchat", "+15550002", "u2", "test")])
        await _send(app, dm("200", user="u2"), "please", "m3")
        assert adapter.sent == [("100", "echo: hello", "m1"), ("200", PRIVATE, "m2")]
        assert app.runner.deps.access.refused == {("testchat", "not_allowed"): 2}
        assert await app.store.get_entry("agent:main:testchat:dm:200") is None
    finally:
        await app.stop()
    # One session (the allowed DM) with its two transcript rows, its intake row and its reply's
    # (settled) delivery obligation; nothing of the stranger, not even the alias their message carried.
    assert _row_counts(tmp_path) == {"sessions": 1, "messages": 2, "routes": 1, "inbound": 1,
                                     "delivery_obligations": 1, "identity_aliases": 0}


async def test_the_refusal_notice_is_sent_once_a_day_in_dms_only(tmp_path):
    app, adapter = await _app(tmp_path, {"allowed_users": ["u1"]})
    clock = {"t": 1000.0}
    app.runner.deps.access.clock = lambda: clock["t"]
    group = SessionSource("testchat", "-5", chat_type="group", chat_name="G", user_id="u3", user_name="Eve")
    try:
        await _send(app, dm("200", user="u2"), "one", "a1")
        clock["t"] += NOTICE_EVERY_S - 1
        await _send(app, dm("200", user="u2"), "two", "a2")
        clock["t"] += 1
        await _send(app, dm("200", user="u2"), "three", "a3")
        await _send(app, group, "hi all", "g1")
        assert adapter.sent == [("200", PRIVATE, "a1"), ("200", PRIVATE, "a3")]
    finally:
        await app.stop()


async def test_an_empty_refusal_notice_refuses_in_silence(tmp_path):
    app, adapter = await _app(tmp_path, {"allowed_users": ["u1"], "refusal_notice": ""})
    try:
        await _send(app, dm("200", user="u2"), "hello", "m1")
        assert adapter.sent == []
        assert app.runner.deps.access.refused == {("testchat", "not_allowed"): 1}
    finally:
        await app.stop()


async def test_a_custom_refusal_notice_is_what_the_sender_reads(tmp_path):
    app, adapter = await _app(tmp_path, {"refusal_notice": "Ask Ann for access."})
    try:
        await _send(app, dm("200", user="u2"), "hello", "m1")
        assert adapter.texts() == ["Ask Ann for access."]
    finally:
        await app.stop()


async def test_bots_are_ignored_without_a_notice_unless_allow_bots(tmp_path):
    bot = SessionSource("testchat", "300", chat_type="dm", user_id="b1", user_name="Robo", is_bot=True)
    app, adapter = await _app(tmp_path, {"allow_all": True})
    try:
        await _send(app, bot, "beep", "m1")
        assert adapter.sent == []
        assert app.runner.deps.access.refused == {("testchat", "bot"): 1}
    finally:
        await app.stop()
    app, adapter = await _app(tmp_path, {"allow_all": True, "allow_bots": True})
    try:
        await _send(app, bot, "beep", "m2")
        assert adapter.sent == [("300", "echo: beep", "m2")]
    finally:
        await app.stop()


async def test_an_alias_of_an_allowed_user_is_allowed_carried_or_stored(tmp_path):
    # Allowed by phone number; the platform names the sender by another id (their UUID) and says
    # the number is an alias of it (docs/behaviour.md §4).
    app, adapter = await _app(tmp_path, {"allowed_users": ["+15550001"]})
    try:
        await _send(app, dm("uuid-1", user="uuid-1"), "first", "m1",
                    aliases=[IdentityAlias("testchat", "+15550001", "uuid-1", "test")])
        # The alias is stored now: a later message without it is still that user's.
        await _send(app, dm("uuid-1", user="uuid-1"), "second", "m2")
        await _send(app, dm("uuid-2", user="uuid-2"), "third", "m3")
        assert app.adapters["testchat"].texts() == ["echo: first", "echo: second", PRIVATE]
    finally:
        await app.stop()


async def test_every_member_of_an_allowed_chat_may_talk_there_but_not_elsewhere(tmp_path):
    app, adapter = await _app(tmp_path, {"allowed_chats": [-5]})  # a TOML integer is an id too
    member = SessionSource("testchat", "-5", chat_type="group", chat_name="G", user_id="u7", user_name="Kim")
    try:
        await _send(app, member, "in the group", "m1")
        await _send(app, dm("700", user="u7"), "in private", "m2")
        assert adapter.sent == [("-5", "echo: in the group", "m1"), ("700", PRIVATE, "m2")]
    finally:
        await app.stop()


async def test_a_role_match_set_by_the_plugin_allows_when_roles_are_configured(tmp_path):
    member = SessionSource("testchat", "c1", chat_type="group", user_id="u8", role_authorized=True)
    app, adapter = await _app(tmp_path, {"allowed_roles": ["111"]})
    try:
        await _send(app, member, "with role", "m1")
        await _send(app, SessionSource("testchat", "c1", chat_type="group", user_id="u9"), "no role", "m2")
        assert adapter.sent == [("c1", "echo: with role", "m1")]
    finally:
        await app.stop()


async def test_a_platform_that_allows_nobody_is_announced_at_start(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="hermes_core.app")
    app, _ = await _app(tmp_path, {})
    await app.stop()
    assert ("testchat: no allowed_users/allow_all configured: every message will be refused"
            in [r.getMessage() for r in caplog.records])
    caplog.clear()
    app, _ = await _app(tmp_path, {"allowed_chats": ["-5"]})
    await app.stop()
    assert not [r for r in caplog.records if "every message will be refused" in r.getMessage()]


async def test_a_deployment_override_decides_and_a_broken_one_fails_closed(tmp_path, caplog):
    app, adapter = await _app(tmp_path, {"allowed_users": ["u1"]})

    class Deployment:
        @override
        def hermes_authorize(self, request):
            return False if "u1" in request.sender_ids else True

    class Broken:
        @override
        def hermes_authorize(self, request):
            raise RuntimeError("audit service down")

    try:
        app.pm.register(Deployment(), name="deployment:test")
        await _send(app, dm("100", user="u1"), "mine", "m1")
        await _send(app, dm("200", user="u2"), "theirs", "m2")
        assert adapter.sent == [("100", PRIVATE, "m1"), ("200", "echo: theirs", "m2")]
        assert app.runner.deps.access.refused == {("testchat", "hermes_authorize"): 1}
        app.pm.unregister(name="deployment:test")
        app.pm.register(Broken(), name="deployment:broken")
        await _send(app, dm("100", user="u1"), "again", "m3")
        assert adapter.sent[2:] == []
        assert "access decision failed on testchat; message refused" in caplog.text
    finally:
        await app.stop()


async def test_admins_are_the_admin_users_in_any_known_form_and_the_local_terminal(tmp_path):
    app, _ = await _app(tmp_path, {"allow_all": True, "admin_users": ["+15550001"]})
    try:
        gate = app.runner.deps.access
        await app.store.record_aliases([IdentityAlias("testchat", "+15550001", "uuid-1", "test")])
        assert gate.is_admin(MessageEvent(source=dm("uuid-1", user="uuid-1"), text="/restart")) is True
        assert gate.is_admin(MessageEvent(source=dm("uuid-2", user="uuid-2"), text="/restart")) is False
        local = SessionSource("local", "terminal", chat_type="dm", user_id="me")
        assert gate.is_admin(MessageEvent(source=local, text="/restart")) is True
    finally:
        await app.stop()

"""Every row of the seed's §4 key tables and docs/behaviour.md §4's table, through both the pure function
and the hook chain (the builtin hookimpls)."""

import pytest

from hermes_core import (
    SessionSource,
    build_session_key,
    canonical_whatsapp_identifier,
    is_shared_multi_user_session,
)
from hermes_core.plugin_system import create_plugin_manager, key_policy, session_key_for, session_shared_for
from hermes_core.settings import GatewayConfig

S = SessionSource

# (source, kwargs, expected key) — docs/behaviour.md §4 table.
SPEC_ROWS = [
    (S("telegram", "12345", chat_type="dm"), {}, "agent:main:telegram:dm:12345"),
    (S("telegram", "12345", chat_type="dm", thread_id="678", user_id="9"), {},
     "agent:main:telegram:dm:12345:678"),
    (S("signal", "", chat_type="dm", user_id="+15550001", user_id_alt="uuid-abc"), {},
     "agent:main:signal:dm:uuid-abc"),
    (S("telegram", "", chat_type="dm"), {}, "agent:main:telegram:dm"),
    (S("telegram", "-10012345", chat_type="group", user_id="u1"), {},
     "agent:main:telegram:group:-10012345:u1"),
    (S("telegram", "-10012345", chat_type="group", user_id="u1"), {"group_sessions_per_user": False},
     "agent:main:telegram:group:-10012345"),
    (S("discord", "12345", chat_type="group", thread_id="678", user_id="u1"), {},
     "agent:main:discord:group:12345:678"),
    (S("discord", "12345", chat_type="group", thread_id="678", user_id="u1"),
     {"thread_sessions_per_user": True}, "agent:main:discord:group:12345:678:u1"),
    (S("slack", "C12345", chat_type="channel", user_id="U1"), {}, "agent:main:slack:channel:C12345:U1"),
    (S("slack", "C12345", chat_type="channel"), {}, "agent:main:slack:channel:C12345"),
    (S("whatsapp", "15551234567:12@s.whatsapp.net", chat_type="dm"), {},
     "agent:main:whatsapp:dm:15551234567"),
    (S("whatsapp", "120363000000000000@g.us", chat_type="group", user_id="15551234567:3@s.whatsapp.net"), {},
     "agent:main:whatsapp:group:120363000000000000:15551234567"),
]

# Seed §4 tables: sample ids such as thread_678 / user_abc are inserted verbatim.
SEED_ROWS = [
    (S("telegram", "12345"), {}, "agent:main:telegram:dm:12345"),
    (S("telegram", "12345", thread_id="thread_678"), {}, "agent:main:telegram:dm:12345:thread_678"),
    (S("signal", "", user_id="user_abc"), {}, "agent:main:signal:dm:user_abc"),
    (S("telegram", ""), {}, "agent:main:telegram:dm"),
    (S("telegram", "-10012345", chat_type="group", user_id="user_abc"), {"group_sessions_per_user": False},
     "agent:main:telegram:group:-10012345"),
    (S("telegram", "-10012345", chat_type="group", user_id="user_abc"), {},
     "agent:main:telegram:group:-10012345:user_abc"),
    (S("discord", "12345", chat_type="group", thread_id="thread_678", user_id="user_abc"), {},
     "agent:main:discord:group:12345:thread_678"),
    (S("discord", "12345", chat_type="group", thread_id="thread_678", user_id="user_abc"),
     {"thread_sessions_per_user": True}, "agent:main:discord:group:12345:thread_678:user_abc"),
    (S("slack", "C12345", chat_type="channel"), {}, "agent:main:slack:channel:C12345"),
    (S("whatsapp", "+15551234567@s.whatsapp.net"), {}, "agent:main:whatsapp:dm:15551234567"),
]

ALL_ROWS = SPEC_ROWS + SEED_ROWS


@pytest.mark.parametrize(("source", "kwargs", "expected"), ALL_ROWS)
def test_build_session_key_table(source, kwargs, expected):
    assert build_session_key(source, **kwargs) == expected


@pytest.mark.parametrize(("source", "kwargs", "expected"), ALL_ROWS)
def test_hook_chain_gives_the_same_key(source, kwargs, expected):
    pm, _ = create_plugin_manager(None)
    config = GatewayConfig(**kwargs)
    assert session_key_for(pm, key_policy(pm, config), source) == expected


@pytest.mark.parametrize(
    ("source", "group", "thread", "expected"),
    [
        (S("telegram", "1", chat_type="dm", user_id="u"), True, True, False),
        (S("telegram", "1", chat_type="dm", user_id="u"), False, False, False),
        (S("telegram", "-1", chat_type="group", user_id="u"), True, False, False),
        (S("telegram", "-1", chat_type="group", user_id="u"), False, False, True),
        (S("discord", "1", chat_type="group", thread_id="7", user_id="u"), True, False, True),
        (S("discord", "1", chat_type="group", thread_id="7", user_id="u"), True, True, False),
        # docs/behaviour.md §4: group_sessions_per_user=False does not switch per-user threads off.
        (S("discord", "1", chat_type="group", thread_id="7", user_id="u"), False, True, False),
        (S("slack", "C1", chat_type="channel", user_id="U"), True, False, False),
    ],
)
def test_shared_predicate(source, group, thread, expected):
    assert is_shared_multi_user_session(
        source, group_sessions_per_user=group, thread_sessions_per_user=thread) is expected


@pytest.mark.parametrize(("source", "kwargs", "_"), ALL_ROWS)
def test_key_and_predicate_follow_one_rule(source, kwargs, _):
    """Shared ⇔ the key carries no participant (for non-DMs with a participant)."""
    group = kwargs.get("group_sessions_per_user", True)
    thread = kwargs.get("thread_sessions_per_user", False)
    shared = is_shared_multi_user_session(
        source, group_sessions_per_user=group, thread_sessions_per_user=thread)
    pm, _r = create_plugin_manager(None)
    policy = key_policy(pm, GatewayConfig(**kwargs))
    assert session_shared_for(pm, policy, source) is shared
    if source.chat_type != "dm" and source.participant_id:
        with_user = build_session_key(source, group, thread)
        without = build_session_key(SessionSource(source.platform, source.chat_id, chat_type=source.chat_type,
                                                  thread_id=source.thread_id), group, thread)
        assert (with_user == without) is shared


@pytest.mark.parametrize(
    ("raw", "aliases", "expected"),
    [
        ("15551234567:12@s.whatsapp.net", (), "15551234567"),
        (" +15551234567 ", (), "15551234567"),
        ("120363000000000000@g.us", (), "120363000000000000"),
        ("15551234567@s.whatsapp.net", ("98765432109876@lid",), "15551234567"),
        ("98765432109876@lid", ("15551234567@s.whatsapp.net",), "15551234567"),
        ("222@lid", ("111@s.whatsapp.net",), "111"),  # tie on length: lexicographically smaller
        ("bad id!@x", (), "bad id!"),  # characters outside the safe set: normalised form
        (None, (), ""),  # docs/behaviour.md §4: never the string "None"
        ("", (), ""),
        (None, ("15551234567@s.whatsapp.net",), ""),
    ],
)
def test_whatsapp_canonicalisation(raw, aliases, expected):
    assert canonical_whatsapp_identifier(raw, aliases) == expected


def test_no_empty_parts_in_keys():
    key = build_session_key(S("slack", "C1", chat_type="channel", thread_id="", user_id=""))
    assert key == "agent:main:slack:channel:C1"
    assert "::" not in key

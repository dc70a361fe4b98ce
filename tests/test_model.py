"""SessionSource, SessionEntry and ids (seed §1, §2; docs/behaviour.md §1, §2)."""

import dataclasses
import json
import logging
import re
from datetime import datetime, timedelta, timezone

import pytest

from hermes_core import MessageEvent, SessionEntry, SessionSource
from hermes_core.model import SourceError, new_session_id, parse_timestamp, validate_session_id


def test_source_is_frozen_and_chat_id_is_str():
    src = SessionSource("telegram", 12345)
    assert src.chat_id == "12345"
    with pytest.raises(dataclasses.FrozenInstanceError):
        src.chat_id = "1"  # type: ignore[misc]


def test_to_dict_order_and_forgeable_fields():
    src = SessionSource("discord", "1", chat_type="group", user_id="u", is_bot=True,
                        role_authorized=True, guild_id="g", parent_chat_id=None)
    data = src.to_dict()
    assert list(data) == ["platform", "chat_id", "chat_name", "chat_type", "user_id", "user_name",
                          "thread_id", "chat_topic", "guild_id"]
    assert "is_bot" not in data and "role_authorized" not in data


def test_from_dict_roundtrip_and_defaults():
    src = SessionSource.from_dict({"platform": "telegram", "chat_id": 42, "is_bot": True})
    assert src == SessionSource("telegram", "42")
    assert src.chat_type == "dm" and src.is_bot is False
    full = SessionSource("slack", "C1", "general", "channel", "U1", "Ann", "171.2", "topic", guild_id="T1")
    assert SessionSource.from_dict(json.loads(json.dumps(full.to_dict()))) == full


@pytest.mark.parametrize("missing", ["platform", "chat_id"])
def test_from_dict_names_missing_field(missing):
    data = {"platform": "telegram", "chat_id": "1"}
    del data[missing]
    with pytest.raises(SourceError, match=missing):
        SessionSource.from_dict(data)


def test_unknown_platform_is_kept():
    assert SessionSource.from_dict({"platform": "myplatform", "chat_id": "x"}).platform == "myplatform"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (SessionSource("local", "terminal"), "CLI terminal"),
        (SessionSource("telegram", "1", user_name="Alice"), "DM with Alice"),
        (SessionSource("telegram", "1", user_id="42"), "DM with 42"),
        (SessionSource("telegram", "1"), "DM with user"),
        (SessionSource("telegram", "-1", "My Group", "group", thread_id="12345"),
         "group: My Group, thread: 12345"),
        (SessionSource("slack", "C1", chat_type="channel"), "channel: C1"),
        (SessionSource("discord", "9", "Thready", "thread"), "Thready"),
    ],
)
def test_description(source, expected):
    assert source.description == expected


def test_session_id_format_and_validation():
    sid = new_session_id(datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc))
    assert re.fullmatch(r"20260102_030405_[0-9a-f]{8}", sid)
    for bad in ("", "../x", "a/b", "a\\b"):
        with pytest.raises(ValueError):
            validate_session_id(bad)


def test_entry_roundtrip_and_naive_time_is_local():
    naive = "2026-01-02T03:04:05"
    entry = SessionEntry.from_dict({"session_key": "k", "session_id": "s", "created_at": naive,
                                    "legacy_field": 1, "origin": {"platform": "telegram", "chat_id": 5}})
    expected = datetime.fromisoformat(naive).astimezone().astimezone(timezone.utc)
    assert entry.created_at == expected and entry.updated_at == expected
    assert entry.platform == "telegram"
    again = SessionEntry.from_dict(json.loads(json.dumps(entry.to_dict())))
    assert again == entry


def test_entry_with_a_bad_optional_field_is_kept_with_a_warning(caplog):
    """docs/behaviour.md §2: a malformed optional field takes its default, logged by name; the
    entry (and its route) stays."""
    data = {"session_key": "agent:main:telegram:dm:12345", "session_id": "20260301_120000_0a1b2c3d",
            "created_at": "2026-03-01T12:00:00+00:00", "resume_pending": True,
            "resume_reason": "restart_timeout", "last_resume_marked_at": "yesterday-ish",
            "suspended": "maybe", "input_tokens": "many", "origin": {"chat_id": "12345"}}
    with caplog.at_level(logging.WARNING, logger="hermes_core.model.entry"):
        entry = SessionEntry.from_dict(data)
    assert entry.session_id == "20260301_120000_0a1b2c3d"
    assert (entry.resume_pending, entry.resume_reason) == (True, "restart_timeout")
    assert (entry.last_resume_marked_at, entry.suspended, entry.input_tokens, entry.origin) == (None, False, 0, None)
    assert entry.created_at == datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
    [record] = [r for r in caplog.records if "malformed" in r.getMessage()]
    assert record.getMessage() == ("session entry 'agent:main:telegram:dm:12345': malformed field(s) "
                                   "'input_tokens', 'suspended', 'last_resume_marked_at', 'origin' "
                                   "replaced by their defaults")


def test_entry_without_created_at_takes_updated_at():
    entry = SessionEntry.from_dict({"session_key": "k", "session_id": "s", "created_at": "garbage",
                                    "updated_at": "2026-03-01T12:00:00+00:00"})
    assert entry.created_at == entry.updated_at == datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("data, field", [
    ({"session_id": "s", "created_at": "2026-03-01T12:00:00+00:00"}, "session_key"),
    ({"session_key": "k", "created_at": "2026-03-01T12:00:00+00:00"}, "session_id"),
    ({"session_key": "k", "session_id": "../etc", "created_at": "2026-03-01T12:00:00+00:00"}, "session_id"),
])
def test_entry_without_a_usable_key_or_id_is_rejected(data, field):
    with pytest.raises(ValueError, match=f"'{field}'"):
        SessionEntry.from_dict(data)


def test_parse_timestamp_epoch_and_offset():
    assert parse_timestamp(0) == datetime(1970, 1, 1, tzinfo=timezone.utc)
    assert parse_timestamp("2026-01-01T09:00:00+09:00") == datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert parse_timestamp("2026-01-01T00:00:00+00:00") - parse_timestamp(0) > timedelta(0)


def test_message_event_command_parsing():
    ev = MessageEvent(SessionSource("telegram", "1"), text="/queue@mybot do this")
    assert ev.command() == ("queue", "do this")
    assert MessageEvent(SessionSource("local", "t"), text="hello").command() == ("", "hello")


def test_message_text_with_lone_surrogates_is_made_valid_utf8():
    assert MessageEvent(SessionSource("local", "t"), text="caf\udce9").text == "caf\ufffd"
    assert MessageEvent(SessionSource("local", "t"), text="a\ud800b").text == "a\ufffdb"
    assert MessageEvent(SessionSource("local", "t"), text="naïve ✓").text == "naïve ✓"

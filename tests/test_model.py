"""SessionSource, SessionEntry and ids (seed §1, §2; docs/behaviour.md §1, §2)."""

import dataclasses
import json
import logging
import re
from datetime import datetime, timedelta, timezone

import pytest

from hermes_core import MessageEvent, SessionEntry, SessionSource
from hermes_core.model import SourceError, new_session_id, parse_timestamp, validate_session_id
from hermes_core.model.text import escape_controls


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


@pytest.mark.parametrize("text, expected", [
    ("/undo\u200b", ("undo", "")),            # zero-width space
    ("/new\u2060 Trip", ("new", "Trip")),      # word joiner
    ("/\ufeffstatus", ("status", "")),         # BOM / zero-width no-break space
    ("/re\u200dset", ("reset", "")),           # zero-width joiner inside the name
    ("/queue@my\u200cbot hi", ("queue", "hi")),  # zero-width non-joiner in the suffix
])
def test_command_name_ignores_invisible_format_characters(text, expected):
    # docs/behaviour.md §11: invisible format characters (zero-width space/joiners, word joiner,
    # BOM, bidi controls) are no part of a command's name.
    assert MessageEvent(SessionSource("telegram", "1"), text=text).command() == expected


@pytest.mark.parametrize("text, expected", [
    ("\u200b/undo", ("undo", "")),               # zero-width space before the slash
    ("\ufeff/new Trip", ("new", "Trip")),        # BOM: a copy from a file
    ("\u200e\u2066/status", ("status", "")),     # bidi mark and isolate
    ("\U000e0041/undo 2", ("undo", "2")),         # a tag character
])
def test_invisible_characters_before_the_slash_leave_a_command(text, expected):
    # docs/behaviour.md §11: invisible format characters before the slash are unseen, as in the
    # name: the text is the command the user sees.
    event = MessageEvent(SessionSource("telegram", "1"), text=text)
    assert (event.is_command, event.command()) == (True, expected)


@pytest.mark.parametrize("text", [" /undo", "\n/undo", "\u200b //undo", "//undo", "/\u200b/undo", "\u200b\u200b"])
def test_visible_space_or_a_second_slash_before_the_name_makes_text(text):
    # docs/behaviour.md §11: a space or line break before the slash is visible, and `//text`
    # (also with an unseen character between the slashes) is no command.
    event = MessageEvent(SessionSource("telegram", "1"), text=text)
    assert (event.is_command, event.command(), event.command_addressee()) == (False, ("", text), None)


def test_command_addressee_after_an_invisible_character():
    assert MessageEvent(SessionSource("telegram", "1"), text="\u200b/undo@Other_Bot").command_addressee() == "Other_Bot"


@pytest.mark.parametrize("text, addressee", [
    ("/undo@Other_Bot", "Other_Bot"),         # as written: the adapter compares without case
    ("/queue@other_bot\u200b later", "other_bot"),
    ("/undo@", None),
    ("/undo", None),
    ("hello@bot", None),
])
def test_command_addressee_is_the_bot_named_after_the_at(text, addressee):
    # docs/behaviour.md §11 "Commands addressed to another bot".
    assert MessageEvent(SessionSource("telegram", "1"), text=text).command_addressee() == addressee


def test_command_argument_keeps_its_invisible_characters():
    # Only the name is cleaned: the argument is the user's text, kept as written.
    assert MessageEvent(SessionSource("local", "t"), text="/queue a\u200bb").command() == ("queue", "a\u200bb")


def test_message_text_with_lone_surrogates_is_made_valid_utf8():
    assert MessageEvent(SessionSource("local", "t"), text="caf\udce9").text == "caf\ufffd"
    assert MessageEvent(SessionSource("local", "t"), text="a\ud800b").text == "a\ufffdb"
    assert MessageEvent(SessionSource("local", "t"), text="naïve ✓").text == "naïve ✓"


def test_nul_characters_become_replacement_characters_in_text_names_ids_and_replies():
    # docs/behaviour.md §7: PostgreSQL's text cannot hold U+0000, so one in a message was accepted
    # and then failed its turn there (SQLite kept it): every engine gets U+FFFD instead.
    from hermes_core.agents.base import AgentReply
    from hermes_core.model import TokenUsage
    source = SessionSource("local", "t\x00", user_name="Ann\x00", chat_name="\x00Team")
    assert (source.chat_id, source.user_name, source.chat_name) == ("t\ufffd", "Ann\ufffd", "\ufffdTeam")
    event = MessageEvent(source, text="a\x00b\x00", message_id="m\x00",
                         media=[{"file_name": "x\x00.pdf"}])
    assert (event.text, event.message_id, event.media) == ("a\ufffdb\ufffd", "m\ufffd", [{"file_name": "x\ufffd.pdf"}])
    assert AgentReply("ok\x00", TokenUsage()).text == "ok\ufffd"


def test_format_timestamp_takes_text_and_epoch_seconds_as_before():
    # A plugin's MessageEvent(received_at=...) given as text or epoch seconds (docs/behaviour.md §0)
    from hermes_core.model import format_timestamp
    assert format_timestamp("2026-01-01T21:00:00+09:00") == "2026-01-01T12:00:00+00:00"
    assert format_timestamp(1767268800.0) == "2026-01-01T12:00:00+00:00"
    assert format_timestamp(datetime(2026, 1, 1, 21, 0, tzinfo=timezone(timedelta(hours=9)))) == \
        "2026-01-01T12:00:00+00:00"


def test_to_json_writes_what_the_standard_encoder_wrote():
    from hermes_core.model.text import to_json
    # integers beyond 64 bits (orjson alone refuses them), int keys, nested tuples
    assert to_json({"size": 2**70, 1: ("a", ("b",))}) == '{"size":1180591620717411303424,"1":["a",["b"]]}'
    assert json.loads(to_json([-(2**64)])) == [-18446744073709551616]
    # NaN and infinities are not JSON: null, never a bare NaN that strict readers reject
    assert to_json({"cost": float("nan"), "t": float("inf")}) == '{"cost":null,"t":null}'


@pytest.mark.parametrize("value, named", [
    ({"at": datetime(2026, 1, 1)}, "datetime"),  # a naive time would be stored without offset
    ({"x": dataclasses.make_dataclass("Media", ["a"])(1)}, "Media"),
    ({(1, 2): "v"}, "tuple"),
    ({"x": {1}}, "set"),
    ({"x": object()}, "object"),
])
def test_to_json_refuses_what_is_not_json_data_and_names_it(value, named):
    from hermes_core.model.text import to_json
    with pytest.raises(TypeError, match=named):
        to_json(value)


def test_to_json_refuses_a_lone_surrogate():
    from hermes_core.model.text import to_json
    with pytest.raises(ValueError, match="surrogate"):
        to_json({"name": "a\ud800"})


def test_token_usage_counts_only_what_is_a_count(caplog):
    from hermes_core.model import TokenUsage
    with caplog.at_level(logging.WARNING):
        usage = TokenUsage(input_tokens=2**70, output_tokens=3, cache_read_tokens=-1, cache_write_tokens=True,
                           estimated_cost_usd=float("nan"), cost_status="estimated")
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens,
            usage.total_tokens, usage.estimated_cost_usd) == (0, 3, 0, 0, 3, 0.0)
    text = caplog.text
    for name in ("input_tokens", "cache_read_tokens", "cache_write_tokens", "estimated_cost_usd"):
        assert f"'{name}'" in text
    assert "'output_tokens'" not in text
    assert TokenUsage(estimated_cost_usd=float("inf")).estimated_cost_usd == 0.0
    assert TokenUsage(input_tokens=5, estimated_cost_usd=0.25).estimated_cost_usd == 0.25


def test_agent_reply_text_and_reasoning_are_valid_unicode():
    from hermes_core.agents.base import AgentReply
    from hermes_core.model import TokenUsage
    reply = AgentReply("ok \ud800", TokenUsage(),
                       reasoning={"reasoning": "th\udc80ink", "reasoning_details": [{"k\udfff": 1}]})
    assert reply.text == "ok \ufffd"
    assert reply.reasoning == {"reasoning": "th\ufffdink", "reasoning_details": [{"k\ufffd": 1}]}


def test_escape_controls_shows_invisible_characters_of_every_plane():
    # The admin CLI's form (docs/behaviour.md §7): BMP characters as \uNNNN, a tag character
    # (plane 14) as \UNNNNNNNN, so no escape can be read as a different character.
    assert escape_controls("a\u00adb\u202ec\U000e0041\x1b") == "a\\xadb\\u202ec\\U000e0041\\x1b"


def test_the_largest_integer_the_store_holds_is_one_constant_of_the_model():
    """docs/behaviour.md §3: the store holds signed 64-bit integers. The token counters, the
    import check of an older gateway's files and the CLI's --limit cap use one constant, in the
    model that every layer imports, instead of copies of 2**63 - 1."""
    from hermes_core.cli import sessions
    from hermes_core.model import TokenUsage, limits, usage
    from hermes_core.store import rows

    assert (limits.INT64_MIN, limits.INT64_MAX) == (-9223372036854775808, 9223372036854775807)
    assert (rows.INT64_MIN is limits.INT64_MIN, rows.INT64_MAX is limits.INT64_MAX,
            sessions.INT64_MAX is limits.INT64_MAX, hasattr(usage, "MAX_COUNT")) == (True, True, True, False)
    assert TokenUsage(input_tokens=9223372036854775807).input_tokens == 9223372036854775807

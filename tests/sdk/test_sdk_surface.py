"""The plugin author's one import surface (docs/plugins.md): every name a platform plugin uses
comes from `hermes_core.sdk`, with the values the SDK documents."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import hermes_core.sdk as sdk
from hermes_core.model.events import event_from_dict, event_to_dict

PLUGIN_NAMES = [
    "BaseAdapter", "AdapterSpec", "SendResult", "SessionSource", "MessageEvent", "hookimpl", "SettingsSpec",
    "PlatformSettings", "IdentityAlias", "chunk_text", "measure", "ChatSendQueue", "send_chunks",
    "send_with_retry", "RetryPolicy", "RetryAfter", "RetryAfterExceeded", "SendError", "MalformedPayload",
    "CAP_EDIT", "CAP_THREADS", "CAP_TYPING", "CAP_MEDIA", "CAP_REACTIONS", "CAP_WEBHOOK", "QueuedChange",
    "offer_change",
]


def test_every_plugin_name_is_exported_from_the_sdk():
    assert [name for name in PLUGIN_NAMES if name not in sdk.__all__ or not hasattr(sdk, name)] == []
    assert sdk.TESTING_PACKAGE == "hermes_core.testing"


def test_capability_names():
    assert (sdk.CAP_EDIT, sdk.CAP_THREADS, sdk.CAP_TYPING, sdk.CAP_MEDIA, sdk.CAP_REACTIONS, sdk.CAP_WEBHOOK) == (
        "edit", "threads", "typing", "media", "reactions", "webhook")
    assert sdk.CAPABILITIES == {"edit", "threads", "typing", "media", "reactions", "webhook"}


def test_adapter_spec_ingress_and_busy_input_defaults():
    spec = sdk.AdapterSpec(name="x", label="X")
    assert (spec.ingress, spec.busy_input_mode) == ("single_receiver", None)
    shared = sdk.AdapterSpec(name="x", label="X", ingress=sdk.INGRESS_SHARED, busy_input_mode="queue")
    assert (shared.ingress, shared.busy_input_mode) == ("shared", "queue")


def test_malformed_payload_names_the_field_and_is_a_value_error():
    err = sdk.MalformedPayload("message.chat.id", "is missing")
    assert isinstance(err, ValueError)
    assert (err.field, err.problem, str(err)) == ("message.chat.id", "is missing",
                                                  "malformed payload: message.chat.id is missing")


def test_platform_settings_defaults_and_forbidden_extras():
    settings = sdk.PlatformSettings()
    assert settings.model_dump() == {
        "enabled": False, "adapter": None, "allowed_users": [], "allowed_chats": [], "allowed_roles": [],
        "allow_all": False, "allow_bots": False, "refusal_notice": "This assistant is private.",
        "admin_users": [], "home_channel": None, "home_channel_name": None, "edits_as_turns": False}
    with pytest.raises(ValidationError, match="allowed_user\n  Extra inputs are not permitted"):
        sdk.PlatformSettings(allowed_user=["1"])


def test_an_id_list_from_the_environment_is_a_json_list_or_comma_separated_ids():
    """docs/configuration.md §2: an id list given as one string is comma-separated ids or a JSON
    list. A broken JSON list ('[111, 222', a bracket lost in a shell or an .env file) used to be
    split on its commas into the ids '[111' and '222', so user 111 was refused without a word."""
    assert sdk.PlatformSettings(allowed_users="111222333, 444555666").allowed_users == [
        "111222333", "444555666"]
    assert sdk.PlatformSettings(admin_users='[111, "222"]').admin_users == ["111", "222"]
    with pytest.raises(ValidationError) as caught:
        sdk.PlatformSettings(allowed_users="[111, 222")
    assert [(e["loc"], e["msg"]) for e in caught.value.errors()] == [(
        ("allowed_users",),
        "Value error, starts with '[' but is not a valid JSON list; write a JSON list ([111, 222]) "
        "or comma-separated ids (111,222)")]


async def test_base_adapter_record_alias_needs_a_recorder_and_builds_the_alias():
    class Probe(sdk.BaseAdapter):
        spec = sdk.AdapterSpec(name="probe", label="Probe", busy_input_mode="sequential",
                               capabilities=frozenset({sdk.CAP_TYPING}))

        async def start(self): ...

        async def stop(self): ...

        async def send(self, target, text, *, reply_to=None, metadata=None):
            return sdk.SendResult()

    probe = Probe()
    assert (probe.data_dir, probe.busy_input_mode, probe.capabilities) == (None, "sequential", {"typing"})
    with pytest.raises(RuntimeError, match="^probe adapter has no alias recorder bound$"):
        await probe.record_alias("a", "b", source="test")
    recorded = []

    async def recorder(aliases):
        recorded.extend(aliases)

    async def handler(event):
        return None

    probe.bind(handler, record_aliases=recorder)
    await probe.record_alias("+4915112345678", "6f1c-uuid", source="envelope")
    assert recorded == [sdk.IdentityAlias("probe", "+4915112345678", "6f1c-uuid", "envelope")]

    # delivery reports (docs/behaviour.md §6): unbound → RuntimeError; bound → the platform's
    # name, the message id, the status and the error reach the reporter (the store's ledger).
    with pytest.raises(RuntimeError, match="^probe adapter has no delivery reporter bound$"):
        await probe.report_delivery("m-1", "failed", "window closed")
    reports = []

    async def reporter(platform, message_id, status, error):
        reports.append((platform, message_id, status, error))
        return 42

    probe.bind(handler, report_delivery=reporter)
    assert await probe.report_delivery("m-1", "failed", "window closed") == 42
    assert reports == [("probe", "m-1", "failed", "window closed")]
    await probe.record_alias("a1", "b1", source="still bound")  # binding one keeps the other
    assert recorded[-1] == sdk.IdentityAlias("probe", "a1", "b1", "still bound")


def test_new_message_event_fields_survive_the_intake_dict():
    event = sdk.MessageEvent(
        source=sdk.SessionSource("telegram", "-1001", chat_type="group", user_id="7"), text="and this?",
        message_id="55", reply_to_message_id=54, reply_to_text="the earlier message", reply_to_author_id="8",
        reply_to_author_name="Bob", platform_update_id=990001,
        channel_context=[{"author": "Carol", "text": "hello all"}],
        aliases=[sdk.IdentityAlias("telegram", "-1001", "-5", "migrate")])
    data = event_to_dict(event)
    assert {k: data[k] for k in ("reply_to_message_id", "reply_to_text", "reply_to_author_id",
                                 "reply_to_author_name", "platform_update_id", "channel_context")} == {
        "reply_to_message_id": "54", "reply_to_text": "the earlier message", "reply_to_author_id": "8",
        "reply_to_author_name": "Bob", "platform_update_id": "990001",
        "channel_context": [{"author": "Carol", "text": "hello all"}]}
    assert "aliases" not in data
    back = event_from_dict(data)
    assert (back.reply_to_message_id, back.reply_to_author_name, back.platform_update_id, back.channel_context) == (
        "54", "Bob", "990001", [{"author": "Carol", "text": "hello all"}])
    plain = event_to_dict(sdk.MessageEvent(source=sdk.SessionSource("telegram", "1"), text="hi"))
    assert sorted(plain) == ["kind", "media", "message_id", "received_at", "source", "text"]


def _core_imports(path):
    """`hermes_core…` modules imported by the Python file at `path`."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("hermes_core"):
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(a.name for a in node.names if a.name.startswith("hermes_core"))
    return found


def test_the_telegram_plugin_and_the_template_import_only_the_sdk(tmp_path):
    from pathlib import Path

    from hermes_core.templates import render_plugin

    telegram = Path(__file__).resolve().parents[2] / "plugins" / "telegram" / "hermes_telegram"
    generated = render_plugin("acme", tmp_path)
    imports = {str(p.relative_to(p.parents[1])): sorted(set(_core_imports(p)))
               for p in sorted([*telegram.glob("*.py"), *(generated / "hermes_acme").glob("*.py")])}
    assert {name: mods for name, mods in imports.items() if set(mods) - {"hermes_core.sdk"}} == {}
    assert imports["hermes_telegram/adapter.py"] == ["hermes_core.sdk"]
    generated_tests = {p.name: sorted(set(_core_imports(p))) for p in (generated / "tests").glob("*.py")}
    assert generated_tests == {"test_adapter_acme.py": ["hermes_core.sdk", "hermes_core.testing"],
                               "test_contract_acme.py": ["hermes_core.testing"]}


def test_an_id_rule_reads_each_entry_and_names_one_that_can_never_match():
    # docs/behaviour.md §9: a platform model's rule turns entries into the ids it sends and
    # refuses an entry no id can equal; a model without a rule keeps entries as written.
    class Digits(sdk.PlatformSettings):
        table = "digits"
        user_id_rule = sdk.IdRule(read=lambda text: text if text.isdigit() else None, never="a digits user",
                                  accepted="digits (42)")

    assert Digits(allowed_users=[" 42", 7], admin_users="8, 9").allowed_users == ["42", "7"]
    assert Digits(admin_users="8, 9").admin_users == ["8", "9"]
    assert Digits(allowed_chats=["any chat"]).allowed_chats == ["any chat"]
    assert sdk.PlatformSettings(allowed_users=["@alice"]).allowed_users == ["@alice"]
    with pytest.raises(ValidationError) as info:
        Digits(admin_users=["8", "@alice"])
    assert ("platforms.digits.admin_users: '@alice' can never match a digits user: write digits (42)"
            in str(info.value))

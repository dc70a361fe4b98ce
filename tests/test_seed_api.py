"""The seed's public API as top-level exports (seed §3, §9): code written against the seed's
signatures runs, and without a plugin manager the installed plugins' one is used, so a platform's
`pii_safe` declaration and the deployment's overrides count (docs/behaviour.md §7)."""

from __future__ import annotations

import inspect

import pytest

import hermes_core
from hermes_core import GatewayConfig, SessionSource, SessionStore, build_session_context, build_session_context_prompt
from hermes_core.plugin_system import manager


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """A HERMES_HOME of its own and a fresh installed plugin manager for each test."""
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    monkeypatch.delenv("HERMES_CONFIG", raising=False)
    monkeypatch.setattr(manager, "_INSTALLED", {})
    return tmp_path


def test_top_level_exports_have_the_seed_signatures():
    assert {"SessionStore", "build_session_context", "build_session_context_prompt"} <= set(hermes_core.__all__)
    assert list(inspect.signature(SessionStore).parameters)[:3] == ["sessions_dir", "config",
                                                                     "has_active_processes_fn"]
    context_params = inspect.signature(build_session_context).parameters
    assert list(context_params)[:3] == ["source", "config", "session_entry"]
    assert context_params["session_entry"].default is None
    prompt_params = inspect.signature(build_session_context_prompt).parameters
    assert prompt_params["redact_pii"].kind is inspect.Parameter.KEYWORD_ONLY
    assert prompt_params["redact_pii"].default is False


async def test_session_store_with_the_seed_constructor(installed):
    config = GatewayConfig(home=installed)
    store = SessionStore(installed / "sessions", config, has_active_processes_fn=lambda key: False)
    async with store:
        entry = await store.get_or_create_session(SessionSource("telegram", 12345, chat_type="dm", user_id="12345"))
        assert entry.session_key == "agent:main:telegram:dm:12345"
        assert (await store.get_or_create_session(entry.origin)).session_id == entry.session_id


def test_telegram_ids_are_never_raw_with_redaction(installed):
    config = GatewayConfig(home=installed, platforms={"telegram": {"enabled": True}})
    source = SessionSource("telegram", "12345", chat_type="dm", user_id="12345")
    prompt = build_session_context_prompt(build_session_context(source, config), redact_pii=True)
    assert '**Source:** Telegram ("DM with user_5994471abb01")' in prompt.splitlines()
    assert "12345" not in prompt
    # Without redaction the raw id is there.
    assert '**User ID:** "12345"' in build_session_context_prompt(build_session_context(source, config)).splitlines()


def test_discord_ids_are_always_raw(installed):
    # Discord is never pii_safe (mentions need raw ids): redact_pii changes nothing.
    config = GatewayConfig(home=installed, platforms={"discord": {"enabled": True}})
    source = SessionSource("discord", "223456789012345678", chat_type="dm", user_id="323456789012345678")
    prompt = build_session_context_prompt(build_session_context(source, config), redact_pii=True)
    assert '**User ID:** "323456789012345678"' in prompt.splitlines()
    assert '- `"origin"` → Back to this chat ("223456789012345678")' in prompt.splitlines()


def test_deployment_overrides_of_the_installed_config_apply(installed, monkeypatch):
    (installed / "seed_api_override.py").write_text(
        "from hermes_core import override\n"
        "@override\n"
        "def hermes_pseudonymize(platform, kind, value):\n"
        "    return 'person-x' if kind == 'user' else None\n")
    monkeypatch.syspath_prepend(str(installed))
    (installed / "hermes.toml").write_text('[plugins]\noverrides = ["seed_api_override"]\n')
    config = GatewayConfig(home=installed, platforms={"telegram": {"enabled": True}})
    source = SessionSource("telegram", "12345", chat_type="dm", user_id="12345")
    prompt = build_session_context_prompt(build_session_context(source, config), redact_pii=True)
    assert '**User ID:** "person-x"' in prompt.splitlines()

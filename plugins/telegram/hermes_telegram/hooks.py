"""Hook implementations of the Telegram plugin (entry point `hermes_core.plugins: telegram`).

* `hermes_settings_schema`: the `[platforms.telegram]` table → `TelegramSettings`.
* `hermes_configure`: remembers HERMES_HOME, where the migration alias file lives.
* `hermes_canonical_identity`: a migrated supergroup's new chat id → the group's original id
  (docs/platforms.md TG-T6; design in `aliases.py`), so its sessions keep their key. Returns None
  (defer to the core) for everything else. No `tryfirst`: that is reserved for deployments.
* `hermes_platform_notes`: Telegram lines for the session-context prompt (seed §9).
"""

from __future__ import annotations

from pathlib import Path

from hermes_core import SettingsSpec, hookimpl
from hermes_core.model.context import neutralize_untrusted
from hermes_core.settings import default_home

from .aliases import FILE_NAME, ChatAliasStore
from .settings import TelegramSettings

HERMES_API = 1
PLATFORM = "telegram"

# One alias store per process, pointed at the configured HERMES_HOME by `hermes_configure`
# (several apps in one process, as in tests, share it when they share a home).
_state: dict[str, ChatAliasStore | None] = {"store": None}


def alias_store_path(home: Path | str) -> Path:
    """`<home>/telegram/chat_aliases.json`."""
    return Path(home) / "telegram" / FILE_NAME


def alias_store() -> ChatAliasStore:
    """The alias store of the configured HERMES_HOME (default: `$HERMES_HOME` or `~/.hermes`)."""
    store = _state["store"]
    if store is None:
        store = ChatAliasStore(alias_store_path(default_home()))
        _state["store"] = store
    return store


@hookimpl
def hermes_configure(config):
    """Point the alias store at `config.home` (a GatewayConfig)."""
    home = getattr(config, "home", None)
    if home is not None:
        path = alias_store_path(home)
        current = _state["store"]
        if current is None or current.path != path:
            _state["store"] = ChatAliasStore(path)


@hookimpl
def hermes_settings_schema():
    """The `[platforms.telegram]` table is validated into `TelegramSettings`."""
    return [SettingsSpec(PLATFORM, TelegramSettings)]


@hookimpl
def hermes_canonical_identity(platform, kind, value):
    """Telegram chat ids that are the result of a group → supergroup migration map to the
    original group id; None (defer) for anything else."""
    if platform != PLATFORM or kind != "chat" or not value:
        return None
    return alias_store().canonical(str(value))


@hookimpl
def hermes_platform_notes(context):
    """Context lines for Telegram sessions: formatting and topic facts the agent should know."""
    source = getattr(context, "source", None)
    if source is None or getattr(source, "platform", None) != PLATFORM:
        return None
    notes = ["Platform: Telegram. Messages are limited to 4096 characters; long replies are split.",
             "Code blocks (``` fences) and `inline code` render as code; other Markdown is shown literally."]
    thread_id = getattr(source, "thread_id", None)
    if thread_id:
        topic = getattr(source, "chat_topic", None)
        # Topic names are chosen by chat members: neutralised before they reach the prompt.
        where = f"the forum topic {neutralize_untrusted(topic)}" if topic else (
            "the General topic" if thread_id == "1" else "a forum topic")
        notes.append(f"This conversation is in {where}; every member of the topic shares it.")
    return notes

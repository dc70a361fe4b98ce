"""Session context injection (seed §9; SPEC.md §7).

`build_session_context` gathers what the agent should know about the current session;
`build_session_context_prompt` renders the dynamic `## Current Session Context` section of the
system prompt. Peer-controlled text (display names, chat names, topics) passes through
`neutralize_untrusted`. With redaction on and a `pii_safe` adapter, user and chat ids are
replaced by pseudonyms of their canonical form (hook `hermes_pseudonymize`); routing, keys and
adapters keep the raw ids. In shared multi-user sessions the prompt names no user and does not
change from turn to turn (no user, no message id, no "updated at"), so prompt caching holds.
"""

from __future__ import annotations

from typing import Any

from ..model.context import SessionContext, attach_entry, neutralize_untrusted
from ..model.entry import SessionEntry
from ..model.source import Platform, SessionSource
from ..model.timeutil import format_timestamp
from ..plugin_system.manager import key_policy, session_shared_for
from ..types import AdapterSpec

HEADER = "## Current Session Context"
SHARED_NOTE = ("This is a multi-user {scope}. Messages are prefixed with [sender name]. "
               "Several users may take part.")


def build_session_context(source: SessionSource, config: Any, session_entry: SessionEntry | None = None,
                          *, pm: Any) -> SessionContext:
    """Build the SessionContext for `source` (seed §9 "construction", steps 1–4).

    Args:
        source: the message's origin (raw ids).
        config: GatewayConfig; enabled `[platforms.<id>]` tables give the connected platforms, and
            a table's `home_channel` value (a chat id) its home channel.
        session_entry: when given, its key, id and times are attached.
        pm: the plugin manager (the `hermes_session_shared` hook decides sharing, seed §5).
    """
    platforms = tuple(config.enabled_platforms())
    homes = {name: str(table["home_channel"]) for name, table in config.platforms.items()
             if isinstance(table, dict) and name in platforms and table.get("home_channel")}
    shared = session_shared_for(pm, key_policy(pm, config), source)
    context = SessionContext(source=source, connected_platforms=platforms, home_channels=homes,
                             shared_multi_user_session=shared)
    return attach_entry(context, session_entry)


def should_redact(config: Any, spec: AdapterSpec | None) -> bool:
    """True when ids must be pseudonymised in the prompt: `[redaction] enabled` and the adapter
    declares `pii_safe=True` (Discord and unmarked plugin platforms never are; seed §9)."""
    return bool(config.redaction.enabled and spec is not None and spec.pii_safe)


def _id_text(pm: Any, platform: str, kind: str, value: str | None, redact: bool) -> str | None:
    if not value:
        return None
    if not redact:
        return value
    canonical = pm.hook.hermes_canonical_identity(platform=platform, kind=kind, value=value) or value
    return pm.hook.hermes_pseudonymize(platform=platform, kind=kind, value=canonical) or canonical


def _described(name: str | None, ident: str | None) -> str:
    if name and ident:
        return f"{neutralize_untrusted(name)} (id: {ident})"
    if name:
        return neutralize_untrusted(name)
    return f"id: {ident}" if ident else ""


def build_session_context_prompt(context: SessionContext, *, pm: Any, redact: bool) -> str:
    """Render the `## Current Session Context` prompt section (seed §9).

    Args:
        context: from `build_session_context`.
        pm: the plugin manager (pseudonyms, canonical ids and `hermes_platform_notes` lines).
        redact: pseudonymise user and chat ids (see `should_redact`).

    Returns:
        Newline-joined lines, header first. Deterministic for equal inputs.
    """
    src = context.source
    lines = [HEADER]
    lines.append(f"Platform: {src.platform}")
    if src.platform == Platform.LOCAL:
        lines.append("Chat: CLI terminal")
    else:
        lines.append(f"Chat type: {src.chat_type}")
        chat = _described(src.chat_name, _id_text(pm, src.platform, "chat", src.chat_id, redact))
        if chat:
            lines.append(f"Chat: {chat}")
        if src.thread_id:
            lines.append(f"Thread: {src.thread_id}")
        if src.chat_topic:
            lines.append(f"Topic: {neutralize_untrusted(src.chat_topic)}")
    if context.shared_multi_user_session:
        lines.append(SHARED_NOTE.format(scope="thread" if src.thread_id else "session"))
    else:
        user = _described(src.user_name,
                          _id_text(pm, src.platform, "user", src.participant_id, redact))
        if user:
            lines.append(f"User: {user}")
    if context.connected_platforms:
        lines.append("Connected platforms: " + ", ".join(context.connected_platforms))
    for platform, chat_id in sorted(context.home_channels.items()):
        lines.append(f"Home channel on {platform}: {_id_text(pm, platform, 'chat', chat_id, redact)}")
    if context.session_id:
        lines.append(f"Session id: {context.session_id}")
    if context.created_at:
        lines.append(f"Session started: {format_timestamp(context.created_at)}")
    for result in pm.hook.hermes_platform_notes(context=context):
        for note in result or ():
            lines.append(str(note))
    return "\n".join(lines)


def sender_prefix(source: SessionSource) -> str:
    """The run-time prefix of a user message in a shared session: `[sender name] ` (seed §5).

    The name is the user's display name (newlines and brackets removed, 64 chars max), else the
    user id, else `unknown`.
    """
    name = source.user_name or source.participant_id or "unknown"
    clean = " ".join(str(name).replace("[", "(").replace("]", ")").split())[:64] or "unknown"
    return f"[{clean}] "

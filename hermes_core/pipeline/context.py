"""Session context injection (seed §9; docs/behaviour.md §7).

`build_session_context` gathers what the agent should know about the current session;
`build_session_context_prompt` renders the dynamic `## Current Session Context` section of the
system prompt. Peer-controlled text (display names, chat names, topics) passes through
`neutralize_untrusted`. With redaction on and a `pii_safe` adapter (`should_redact`), user and
chat ids are replaced by pseudonyms of their canonical form (hook `hermes_pseudonymize`), and the
free text of the prompt (display names, chat names, topics, plugin notes) goes through the
`llm_context`-scope redaction rules (hook `hermes_redaction_rules`, e.g. a phone number in a
display name becomes `[phone]`); routing, keys and adapters keep the raw ids. The rules are not
run over the pseudonyms themselves: a `<12hex>` pseudonym can be all digits and would look like
a raw numeric id to them. In shared multi-user sessions the prompt names no user and does not
change from turn to turn (no user, no message id, no "updated at"), so prompt caching holds.
"""

from __future__ import annotations

from typing import Any

from ..model.context import SessionContext, attach_entry, neutralize_untrusted
from ..model.entry import SessionEntry
from ..model.source import Platform, SessionSource
from ..model.timeutil import format_timestamp
from ..plugin_system.manager import key_policy, session_shared_for
from ..plugin_system.redaction import redact_text
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


def _untrusted(pm: Any, platform: str, text: str, redact: bool) -> str:
    """Peer-controlled `text`, neutralised (docs/behaviour.md §7) and, when redacting, through the
    `llm_context` rules. The rules see the whole text with control characters and newlines
    already collapsed (so a number split by a newline is still caught) and before the length
    cap (so a cut cannot leave half a number behind unmatched)."""
    if not redact:
        return neutralize_untrusted(text)
    flat = neutralize_untrusted(text, max_chars=len(str(text)) + 1)[1:-1]
    return neutralize_untrusted(redact_text(pm, platform, flat, "llm_context"))


def _described(name: str | None, ident: str | None) -> str:
    """`name` is already neutralised (quoted); `ident` a raw id or pseudonym."""
    if name and ident:
        return f"{name} (id: {ident})"
    if name:
        return name
    return f"id: {ident}" if ident else ""


def build_session_context_prompt(context: SessionContext, *, pm: Any, redact: bool) -> str:
    """Render the `## Current Session Context` prompt section (seed §9).

    Args:
        context: from `build_session_context`.
        pm: the plugin manager (pseudonyms, canonical ids and `hermes_platform_notes` lines).
        redact: pseudonymise user and chat ids and pass names, topic and plugin notes through
            the `llm_context` redaction rules (see `should_redact`). Thread ids stay raw: they
            identify a conversation, not a person.

    Returns:
        Newline-joined lines, header first. Deterministic for equal inputs.
    """
    src = context.source

    def untrusted(text: str | None) -> str | None:
        return _untrusted(pm, src.platform, text, redact) if text else None

    lines = [HEADER]
    lines.append(f"Platform: {src.platform}")
    if src.platform == Platform.LOCAL:
        lines.append("Chat: CLI terminal")
    else:
        lines.append(f"Chat type: {src.chat_type}")
        chat = _described(untrusted(src.chat_name), _id_text(pm, src.platform, "chat", src.chat_id, redact))
        if chat:
            lines.append(f"Chat: {chat}")
        if src.thread_id:
            lines.append(f"Thread: {src.thread_id}")
        if src.chat_topic:
            lines.append(f"Topic: {untrusted(src.chat_topic)}")
    if context.shared_multi_user_session:
        lines.append(SHARED_NOTE.format(scope="thread" if src.thread_id else "session"))
    else:
        user = _described(untrusted(src.user_name),
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
            note = str(note)
            lines.append(redact_text(pm, src.platform, note, "llm_context") if redact else note)
    return "\n".join(lines)


def sender_prefix(source: SessionSource) -> str:
    """The run-time prefix of a user message in a shared session: `[sender name] ` (seed §5).

    The name is the user's display name (newlines and brackets removed, 64 chars max), else the
    user id, else `unknown`.
    """
    name = source.user_name or source.participant_id or "unknown"
    clean = " ".join(str(name).replace("[", "(").replace("]", ")").split())[:64] or "unknown"
    return f"[{clean}] "

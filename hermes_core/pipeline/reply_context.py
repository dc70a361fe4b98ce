"""What a platform knows about a message beyond its text, as the agent reads it
(docs/behaviour.md §7; seed §1 `message_id`).

The reply context (`MessageEvent.reply_to_*`) and the channel context (`channel_context`) are
peer-controlled text. They reach the agent as a quoted prefix of the user message it is given —
never the system prompt, which stays byte-stable across turns (seed §5) — and are not written
into the transcript: the stored user row keeps the text as written, as the seed keeps its
`[Triggering message id: …]` note on the API-bound message only.

    [Replying to "Alice": "the deploy failed at step 3"]
    [Recent messages in this channel:]
    ["Bob": "anyone seen the build?"]
    ["Carol": "red since noon"]
    <the user's text>

Each name and text is neutralised (`model.context.neutralize_untrusted`: control, zero-width and
bidi characters removed, one line, length capped, JSON-quoted), so a quote cannot close the
bracket or forge a line of its own. With redaction (`context.should_redact`), an author's name
follows the `[sender name]` rules (pseudonym instead of a missing name, ids, phone numbers and
addresses inside a name replaced).
"""

from __future__ import annotations

from typing import Any

from ..model.context import neutralize_untrusted
from ..model.events import MessageEvent
from ..model.source import SessionSource
from .context import sender_prefix

# Characters of a quoted message and of one channel message kept in the prefix.
QUOTE_MAX_CHARS = 500
CHANNEL_MESSAGE_MAX_CHARS = 300
# Channel messages kept (the most recent ones).
CHANNEL_CONTEXT_MAX_MESSAGES = 20


def _author(event: MessageEvent, author_id: Any, author_name: Any, *, pm: Any, redact: bool) -> str:
    """The neutralised, quoted name of an author of the quoted or backfilled message."""
    name = author_name if isinstance(author_name, str) else None
    uid = author_id if isinstance(author_id, str) else None
    if redact:
        # The same rules as the sender prefix, applied to this author as a source of its own.
        who = SessionSource(event.source.platform, event.source.chat_id, chat_type="group", user_id=uid,
                            user_name=name)
        label = sender_prefix(who, pm=pm, redact=True)[1:-2]
    else:
        label = name or uid or "unknown"
    return neutralize_untrusted(label, 64)


def quoted_context(event: MessageEvent, *, pm: Any = None, redact: bool = False) -> str:
    """The prefix for `event` (module docstring), `""` when the platform told nothing.

    Args:
        event: the inbound message (its `reply_to_*` and `channel_context`).
        pm: the plugin manager (pseudonyms and redaction rules); used only with `redact`.
        redact: the prompt's redaction applies (`context.should_redact`).
    Returns:
        Lines ending with a newline, or `""`.
    """
    lines = []
    # Only a quoted text says anything: a reply known by its target's id or author alone (a
    # Slack thread reply names the thread's root, every message of the thread does) is noise.
    if event.reply_to_text:
        author = _author(event, event.reply_to_author_id, event.reply_to_author_name, pm=pm, redact=redact)
        quote = neutralize_untrusted(event.reply_to_text or "", QUOTE_MAX_CHARS)
        lines.append(f"[Replying to {author}: {quote}]")
    recent = [m for m in event.channel_context if isinstance(m, dict)][-CHANNEL_CONTEXT_MAX_MESSAGES:]
    if recent:
        lines.append("[Recent messages in this channel:]")
        for message in recent:
            author = _author(event, message.get("author_id"), message.get("author"), pm=pm, redact=redact)
            text = neutralize_untrusted(str(message.get("text") or ""), CHANNEL_MESSAGE_MAX_CHARS)
            lines.append(f"[{author}: {text}]")
    return "".join(line + "\n" for line in lines)

"""Hook implementations of the Signal plugin (entry point `hermes_core.plugins: signal`).

* `hermes_settings_schema`: the `[platforms.signal]` table → `SignalSettings`.
* `hermes_platform_notes`: Signal lines for the session-context prompt (seed §9, docs/behaviour.md §7).

Number ↔ UUID folding for keys and pseudonyms is the core's: the adapter reports the pairs it
sees and the core's `hermes_canonical_identity` follows them (the UUID is canonical).
"""

from __future__ import annotations

from hermes_core.sdk import SettingsSpec, hookimpl

from .settings import SignalSettings

HERMES_API = 1
PLATFORM = "signal"


@hookimpl
def hermes_settings_schema():
    """The `[platforms.signal]` table is validated into `SignalSettings`."""
    return [SettingsSpec(PLATFORM, SignalSettings)]


@hookimpl
def hermes_platform_notes(context):
    """Context lines for Signal sessions: what the agent can and cannot do there."""
    source = getattr(context, "source", None)
    if source is None or getattr(source, "platform", None) != PLATFORM:
        return None
    notes = [
        "Platform: Signal. Replies are sent as plain text (Markdown is shown literally); "
        "replies longer than 2000 bytes are split into several messages.",
        "Mentions arrive in the text as @ followed by the person's number or id; you cannot "
        "mention people yourself, and you cannot read the chat's history, attachments or "
        "reactions beyond what is in this conversation.",
        # The per-turn message id is neither in this prompt (which stays the same from turn to
        # turn) nor in the messages the agent gets; say so, so the agent does not invent one.
        "Message ids (Signal timestamps) are not shown to you; your reply quotes the message you "
        "are answering.",
    ]
    if getattr(source, "chat_type", None) == "group":
        notes.append("This is a Signal group: every member sees your replies.")
    return notes

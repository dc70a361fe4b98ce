"""Hook implementations of the Telegram plugin (entry point `hermes_core.plugins: telegram`).

* `hermes_settings_schema`: the `[platforms.telegram]` table → `TelegramSettings`.
* `hermes_platform_notes`: Telegram lines for the session-context prompt (seed §9).

Group → supergroup migrations are recorded as identity aliases in the gateway's store by the
adapter (`aliases.py`); the core's own `hermes_canonical_identity` follows them, so this plugin
implements no canonicalisation of its own.
"""

from __future__ import annotations

from hermes_core.sdk import SettingsSpec, hookimpl, neutralize_untrusted

from .settings import TelegramSettings

HERMES_API = 1
PLATFORM = "telegram"


@hookimpl
def hermes_settings_schema():
    """The `[platforms.telegram]` table is validated into `TelegramSettings`."""
    return [SettingsSpec(PLATFORM, TelegramSettings)]


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

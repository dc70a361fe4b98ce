"""Hook implementations of the Discord plugin (entry point `hermes_core.plugins: discord`).

* `hermes_settings_schema`: the `[platforms.discord]` table → `DiscordSettings`.
* `hermes_platform_notes`: Discord lines for the session-context prompt (docs/behaviour.md §7):
  the length limit, mention syntax, what the agent cannot do there, where the conversation is.
* `hermes_shutdown`: closes the Discord adapter's HTTP session after the gateway's drain (its
  `stop` only stops receiving, so the replies of drained turns still go out).

Discord ids are never pseudonymised (the adapter declares `pii_safe=False`; mentions need raw
ids), so the plugin adds no redaction or identity hooks: the core's defaults apply.
"""

from __future__ import annotations

from hermes_core.sdk import SettingsSpec, hookimpl

from .settings import DiscordSettings

HERMES_API = 1
PLATFORM = "discord"


@hookimpl
def hermes_settings_schema():
    """The `[platforms.discord]` table is validated into `DiscordSettings`."""
    return [SettingsSpec(PLATFORM, DiscordSettings)]


@hookimpl
async def hermes_shutdown(app):
    """Close the Discord adapter (`DiscordAdapter.aclose`) once the gateway has drained."""
    adapter = (getattr(app, "adapters", None) or {}).get(PLATFORM)
    close = getattr(adapter, "aclose", None)
    if close is not None:
        await close()


@hookimpl
def hermes_platform_notes(context):
    """Context lines for Discord sessions; None for other platforms."""
    source = getattr(context, "source", None)
    if source is None or getattr(source, "platform", None) != PLATFORM:
        return None
    notes = [
        "Platform: Discord. Messages are limited to 2000 characters; long replies are split into several messages.",
        "Discord Markdown renders: **bold**, *italics*, `inline code`, ``` fenced code blocks ```, > quotes.",
        "Mention syntax: <@USER_ID> for a user, <#CHANNEL_ID> for a channel, <@&ROLE_ID> for a role "
        "(raw Discord ids). Your replies never notify @everyone, @here or a role.",
        "You only see the messages sent to you in this conversation: you cannot read the channel "
        "history, pinned messages, other channels or attachments' contents, nor react to messages, "
        "unless a tool for it is available.",
        # The per-turn message id is neither in this prompt (which stays the same from turn to
        # turn) nor in the messages the agent gets; say so, so the agent does not invent one.
        "Message ids are not shown to you; each reply is posted as a Discord reply to the message "
        "you are answering.",
    ]
    if getattr(source, "thread_id", None):
        # No names here: the core's context section already shows the (neutralised) chat name.
        notes.append("This conversation is a Discord thread (or forum post); every member of the thread "
                     "shares it and your replies are posted in the thread.")
    elif getattr(source, "chat_type", None) == "dm":
        notes.append("This conversation is a direct message with one user.")
    return notes
